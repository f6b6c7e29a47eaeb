"""The first process of a child's process group, which takes the whole group with it when it goes.

``ServerProcess`` (a server the suite starts) and :mod:`batchperf.launch.child` (the pytest processes
of ``batchperf ab`` and ``refresh --run``) start ``python group_guard.py PARENT_PID GRACE_S -- ARGV…``
in a new session, with :func:`die_with_parent` before it, so this process leads a group that holds the
server and everything the server forks (vLLM's engine core). It lives in ``measure`` (the lowest stage)
so that every stage can start it. It runs ARGV and waits. When it is told to stop (SIGTERM, SIGINT,
SIGHUP), when its parent dies (PR_SET_PDEATHSIG gives it SIGTERM even when the parent was SIGKILLed,
and a changed parent pid covers a parent that died before that was set), or when the server exits, it
ends every other member of its group: SIGTERM, then SIGKILL after GRACE_S. Without it a SIGKILLed
pytest left the server only a SIGTERM of its own, and the children the server forked outlived it.

PARENT_PID need not be the parent: a server kept across processes (:mod:`batchperf.launch.kept_server`)
outlives the process that started it and goes with an owner further up (``batchperf ab``), watched by pid.

Run by path, not as ``-m batchperf…``: it imports nothing of batchperf, so it starts whatever
environment the server is given. It exits with the server's exit code (128 + N for a signal N), or
:data:`GONE` without starting it when PARENT_PID was gone already; either way an end it brought about
because PARENT_PID went is said on stderr, the server's log.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time

import psutil

GROUP_END_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
GONE = 3  # the exit code when the process to end with was gone before the command started (usage is 2)


def die_with_parent(parent: int | None = None) -> None:
    """In the child, before exec: get SIGTERM if the parent dies (even by SIGKILL). Linux only.

    ``parent``: the pid that started this child; when it died before the request was made (between the fork and
    here), the kernel will never send the signal, so this child sends it to itself."""
    if sys.platform.startswith("linux"):
        pr_set_pdeathsig = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)
        if parent is not None and os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGTERM)


def group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes of process group ``pgid``."""
    members = []
    for proc in psutil.process_iter(["status"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info["status"] not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
                members.append(proc.pid)
        except (ProcessLookupError, PermissionError):  # it ended while we looked, or is not ours to see
            continue
    return members


def end_group(grace_s: float, child: subprocess.Popen[bytes]) -> None:
    """SIGTERM every other member of this process's group, then SIGKILL what is left after ``grace_s``."""
    me, pgid = os.getpid(), os.getpgid(0)
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        for pid in group_members(pgid):
            if pid != me:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            child.poll()  # reap the server, so that it leaves the group's live members
            if group_members(pgid) == [me]:
                return
            time.sleep(0.05)


def _is_parent(pid: int) -> bool:
    return os.getppid() == pid


def alive(pid: int) -> bool:
    """An owner that is not this process's parent: alive while its pid is (polled every 0.2 s)."""
    try:
        return psutil.Process(pid).status() not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
    except psutil.NoSuchProcess:
        return False


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        print("usage: group_guard.py PARENT_PID GRACE_S -- COMMAND…", file=sys.stderr)
        return 2
    parent, grace_s, command = int(argv[0]), float(argv[1]), argv[3:]
    stop: list[int] = []
    for sig in GROUP_END_SIGNALS:  # before the server starts: a stop that comes early must not be lost
        signal.signal(sig, lambda signum, frame: stop.append(signum))
    parent_alive = _is_parent if os.getppid() == parent else alive
    if not parent_alive(parent):  # said on stderr (a server's log): a start that fails must say why
        print(f"group_guard: the process this command ends with (pid {parent}) is gone; not starting "
              f"{command[0]}", file=sys.stderr, flush=True)
        return GONE
    child = subprocess.Popen(command)
    while not stop and parent_alive(parent) and child.poll() is None:
        try:
            child.wait(timeout=0.2)
        except subprocess.TimeoutExpired:
            pass
    if not stop and child.poll() is None and not parent_alive(parent):
        print(f"group_guard: the process this command ends with (pid {parent}) is gone; ending {command[0]} and "
              "its group", file=sys.stderr, flush=True)
    end_group(grace_s, child)
    code = child.poll()
    if code is None:  # SIGKILLed above but not reaped yet
        code = child.wait()
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
