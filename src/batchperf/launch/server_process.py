"""A server subprocess the suite starts and must always stop: its own process group, stopped on
``stop()``, at interpreter exit, on SIGTERM/SIGINT, and (Linux) when this process dies.

The server runs in a new session, so ``killpg`` reaches every process it forks (vLLM's engine
core runs in a child process), under a guard (:mod:`batchperf.launch.group_guard`) that leads the
group and ends all of it when it is stopped or this process dies, even by SIGKILL: the stop is done
from the child side too, not only from here. Its output goes to a log file whose tail is quoted in
errors.
"""

from __future__ import annotations

import atexit
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from batchperf.launch import group_guard
from batchperf.launch.group_guard import die_with_parent as _die_with_parent
from batchperf.launch.group_guard import group_members as _group_members

STOP_GRACE_S = 10.0  # SIGTERM, then SIGKILL after this long
GUARD_GRACE_S = 7.0  # the guard's own SIGTERM-to-SIGKILL wait: it is done before stop() escalates
_LIVE: weakref.WeakSet[ServerProcess] = weakref.WeakSet()
_PREVIOUS_HANDLERS: dict[int, Any] = {}
_HOOKED = False


class ServerStartError(RuntimeError):
    """The server exited or did not become ready; the message quotes its log."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class ServerProcess:
    """``argv`` run as a server answering ``health_url``; ``start()`` waits until it does."""

    def __init__(self, argv: Sequence[str], health_url: str, env: dict[str, str] | None = None,
                 name: str = "server") -> None:
        self.argv = list(argv)
        self.health_url = health_url
        self.env = env
        self.name = name
        self.proc: subprocess.Popen[bytes] | None = None
        fd, path = tempfile.mkstemp(prefix=f"batchperf-{name}-", suffix=".log")
        os.close(fd)
        self.log_path = Path(path)

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(text[-lines:])

    def start(self, timeout_s: float, owner_pid: int | None = None) -> None:
        """Start it and wait until it answers. ``owner_pid``: a server kept across processes
        (:mod:`batchperf.launch.kept_server`): it ends with that process instead of this one, and neither this
        process's exit nor its signals stop it (a failed start still does)."""
        kept = owner_pid is not None
        if not kept:
            _install_signal_handlers()
        guard = [sys.executable, group_guard.__file__, str(owner_pid if kept else os.getpid()), str(GUARD_GRACE_S),
                 "--"]
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                guard + self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=self.env, start_new_session=True, preexec_fn=None if kept else _die_with_parent,
            )
        if not kept:
            _LIVE.add(self)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                code = self.proc.returncode
                self.stop()
                raise ServerStartError(f"{self.name} exited with code {code} before it was ready; "
                                       f"log {self.log_path}:\n{self.log_tail()}")
            if healthy(self.health_url):
                return
            time.sleep(0.5)
        self.stop()
        raise ServerStartError(f"{self.name} was not ready at {self.health_url} after {timeout_s:.0f} s "
                               f"(stopped it); log {self.log_path}:\n{self.log_tail()}")

    def stop(self) -> None:
        """Stop the guard (it SIGTERMs the group), SIGKILL what is left after a grace period."""
        proc, self.proc = self.proc, None
        _LIVE.discard(self)
        if proc is None:
            return
        try:
            proc.send_signal(signal.SIGTERM)  # only the guard: a second SIGTERM makes a server skip its shutdown
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            pass
        if proc.poll() is None or _group_members(proc.pid):
            signal_group(proc.pid, signal.SIGKILL)  # the server, or children it left behind
        proc.wait()
        wait_group_gone(proc.pid, STOP_GRACE_S)  # signals land asynchronously


def wait_group_gone(pgid: int, seconds: float) -> bool:
    """Wait up to ``seconds`` for process group ``pgid`` to have no live member; whether it has none."""
    deadline = time.monotonic() + seconds
    while _group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.02)
    return not _group_members(pgid)


def signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def stop_all() -> None:
    for server in list(_LIVE):
        server.stop()


def _on_signal(signum: int, frame: Any) -> None:
    stop_all()
    previous = _PREVIOUS_HANDLERS.get(signum)
    if callable(previous):
        previous(signum, frame)
    elif previous == signal.SIG_DFL:
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


def _install_signal_handlers() -> None:
    """Once, from the main thread: stop servers at exit and on SIGTERM/SIGINT, then do what was done before."""
    global _HOOKED
    if _HOOKED:
        return
    _HOOKED = True
    atexit.register(stop_all)
    if not _is_main_thread():  # signal handlers can only be set from the main thread
        return
    for sig in (signal.SIGTERM, signal.SIGINT):
        _PREVIOUS_HANDLERS[sig] = signal.getsignal(sig)
        signal.signal(sig, _on_signal)


def _is_main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()

