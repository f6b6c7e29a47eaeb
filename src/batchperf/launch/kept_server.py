"""Servers kept across processes: ``batchperf ab --keep-servers`` starts each side's server once, and that side's
later processes use it again (docs/ab.md, "Servers kept across pairs").

A backend that starts its own server (``vllm-server``) asks :func:`reuse_or_start` for it when
``$BATCHPERF_KEEP_SERVERS`` names a folder. A server started there earlier for the same command (the port aside)
and environment, still running and answering, is used again; otherwise one is started, under the group guard
(:mod:`batchperf.launch.group_guard`) watching ``$BATCHPERF_KEEP_SERVERS_OWNER`` (a pid) instead of the process
that started it: it outlives that process, and ends with the owner, even when the owner is SIGKILLed. Each is
recorded in the folder as ``server-KEY.json`` (its health URL, the guard's pid and start time, its log, how often
it was started); the owner ends them with :func:`stop_kept` (at the end of its run, and whenever it wants its
sides' next processes to start fresh ones: ``ab --restart-servers-every``).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from batchperf.launch.environ import KEEP_SERVERS_ENV, KEEP_SERVERS_OWNER_ENV, ROUND_GATE_ENV
from batchperf.launch.group_guard import alive
from batchperf.launch.server_process import (
    STOP_GRACE_S,
    ServerProcess,
    ServerStartError,
    free_port,
    healthy,
    signal_group,
    wait_group_gone,
)

# environment variables that change from test to test or process to process of one side, not part of a server's
# identity: pytest's own, and the round gate of the pair (ab's resident design)
VOLATILE = ("PYTEST_", ROUND_GATE_ENV)
SHELL = ("_", "OLDPWD", "SHLVL")  # what a shell sets per command it starts (bash's $_ is the command's path)
Command = Callable[[int], tuple[Sequence[str], Mapping[str, str], str]]  # port -> (argv, environment, health URL)
_KEPT: list[ServerProcess] = []  # started here: held, so that no handle of a running child is ever collected


@dataclass(frozen=True, slots=True)
class Keep:
    folder: Path
    owner: int


@dataclass(frozen=True, slots=True)
class KeptServer:
    """A kept server as a process that uses it sees it: where it answers, and the pid of its group guard, whose
    process tree (the server and what it forked) does the work this process asks of it."""

    health_url: str
    pid: int

    def __post_init__(self) -> None:
        if self.pid < 1:
            raise ValueError(f"pid: {self.pid}; a kept server's guard is a running process (pid >= 1)")


def keep_from_env(environ: Mapping[str, str] = os.environ) -> Keep | None:
    """The kept servers' folder and owner, when ``$BATCHPERF_KEEP_SERVERS`` is set; ValueError for a bad owner."""
    folder = environ.get(KEEP_SERVERS_ENV)
    if not folder:
        return None
    owner = environ.get(KEEP_SERVERS_OWNER_ENV, "")
    if not owner.isdigit():
        raise ValueError(f"${KEEP_SERVERS_ENV}={folder} keeps servers across processes, but "
                         f"${KEEP_SERVERS_OWNER_ENV}={owner!r} is not a pid: give the pid of the process the kept servers end with (batchperf ab --keep-servers "
                         f"sets both), or unset ${KEEP_SERVERS_ENV}")
    return Keep(Path(folder), int(owner))


def server_key(argv: Sequence[str], env: Mapping[str, str]) -> str:
    """What identifies a kept server: its command and environment, without the :data:`VOLATILE` and :data:`SHELL`
    variables."""
    stable = {k: v for k, v in env.items() if not k.startswith(VOLATILE) and k not in SHELL}
    return hashlib.sha256(json.dumps([list(argv), sorted(stable.items())]).encode()).hexdigest()


def reuse_or_start(keep: Keep, name: str, command: Command, timeout_s: float) -> KeptServer:
    """``command``'s kept server: the recorded one while it runs and answers, else a new one (a recorded one that
    stopped answering is stopped first). ``command(port)`` gives the server's argv, environment and health URL on
    ``port``; its identity is taken at port 0."""
    argv, env, _ = command(0)
    key = server_key(argv, env)
    path = keep.folder / f"server-{key[:16]}.json"
    record = read_record(path)
    if record is not None and running(record) and healthy(record["health_url"]):
        return KeptServer(str(record["health_url"]), int(record["pid"]))
    if record is not None:
        stop_recorded(record)
    if not alive(keep.owner):  # the guard would end the server at once, leaving an empty log
        raise ServerStartError(f"{name}: not started: the process kept servers end with, pid {keep.owner} "
                               f"(${KEEP_SERVERS_OWNER_ENV}), is gone; start the servers under a running owner (batchperf ab "
                               f"--keep-servers sets it), or unset ${KEEP_SERVERS_ENV}")
    argv, env, health = command(free_port())
    server = ServerProcess(argv, health, env=dict(env), name=name)
    server.start(timeout_s, owner_pid=keep.owner)
    _KEPT.append(server)
    assert server.pid is not None  # started
    keep.folder.mkdir(parents=True, exist_ok=True)
    _write(path, {"key": key, "name": name, "health_url": health, "pid": server.pid,
                  "create_time": psutil.Process(server.pid).create_time(), "log": str(server.log_path),
                  "started": time.time(), "starts": (record or {}).get("starts", 0) + 1})
    return KeptServer(health, server.pid)


def read_record(path: Path) -> dict[str, Any] | None:
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and {"health_url", "pid", "create_time"} <= record.keys() else None


def running(record: Mapping[str, Any]) -> bool:
    """The recorded guard still runs (the same process: its pid and start time)."""
    try:
        proc = psutil.Process(int(record["pid"]))
        return proc.create_time() == record["create_time"] and proc.status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, ValueError, TypeError):
        return False


def stop_recorded(record: Mapping[str, Any]) -> None:
    """End a recorded server's whole process group: SIGTERM to its guard, SIGKILL to what is left after a grace."""
    if not running(record):
        return
    pid = int(record["pid"])
    try:
        os.kill(pid, signal.SIGTERM)  # only the guard: it ends the group (a second SIGTERM skips vLLM's shutdown)
    except ProcessLookupError:
        return
    if not wait_group_gone(pid, STOP_GRACE_S):
        signal_group(pid, signal.SIGKILL)
        wait_group_gone(pid, STOP_GRACE_S)


def stop_kept(folder: Path) -> list[dict[str, Any]]:
    """End every server recorded in ``folder``; their records (how often each was started), for the report. The
    records stay: the next process that asks for one of them starts it again, and counts the start."""
    records = [r for p in sorted(folder.glob("server-*.json")) if (r := read_record(p)) is not None]
    for record in records:
        stop_recorded(record)
    for server in list(_KEPT):  # one this process started itself: reap it, so that no zombie or warning is left
        if server.proc is None or server.proc.poll() is not None:
            _KEPT.remove(server)
    return records


def _write(path: Path, record: Mapping[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(record, indent=1) + "\n")
    os.replace(tmp, path)
