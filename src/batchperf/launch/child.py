"""A child process (a pytest run) that never outlives the command that started it, and that its signals reach.

:func:`run_guarded` starts the command under :mod:`batchperf.launch.group_guard` in a new session: the
guard leads the child's process group and ends all of it (SIGTERM, then SIGKILL after a grace period)
when it is told to stop, when the child's time is up, or when this process dies, even by SIGKILL.

Inside :func:`stop_signals`, SIGINT and SIGTERM to this process stop the running child (its whole group,
through the guard), wait for it, and then raise :class:`Stopped`, so the caller writes its final state
and exits 128 + the signal (130, 143). Outside a child they raise :class:`Stopped` at once.

``run_guarded(..., foreground=True)`` (``batchperf run``, whose pytest a user watches at a
terminal) starts the child without the guard, in this process's group, so that a Ctrl-C at the terminal reaches
pytest as it would reach a pytest run by hand; it waits for it to its end, so pytest writes its results file.
It dies with this process all the same (:func:`group_guard.die_with_parent`: a SIGTERM, on which pytest writes
the cells it finished), so a SIGKILLed ``batchperf run`` leaves no pytest measuring on.
The command itself is built by :func:`batchperf.launch.suite.suite_command`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from batchperf.launch import group_guard

INTERRUPT_SIGNALS = (signal.SIGINT, signal.SIGTERM)
GRACE_S = 10.0  # the guard's SIGTERM-to-SIGKILL wait when it ends the child's group
_running: list[subprocess.Popen[bytes]] = []  # the guards of the children running now (this process's main thread)
_pending: list[int] = []  # signals that arrived while a child ran


class Stopped(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived (a KeyboardInterrupt, so code that keeps its work on Ctrl-C keeps it here too)."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


@dataclass(frozen=True, slots=True)
class ChildExit:
    """How a child process ended."""

    returncode: int  # the child's (128 + N when a signal N ended it)
    timed_out: bool = False  # ended by the guard because ``timeout_s`` passed


def exit_code_of(exc: KeyboardInterrupt) -> int:
    """130 for Ctrl-C, 143 for SIGTERM."""
    return exc.exit_code if isinstance(exc, Stopped) else 128 + signal.SIGINT


@contextlib.contextmanager
def stop_signals() -> Iterator[None]:
    """SIGINT/SIGTERM stop the running child, then raise :class:`Stopped` (only in the main thread; else no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        if not _running:
            raise Stopped(signum)
        _pending.append(signum)
        for proc in _running:
            _stop(proc)

    previous = {sig: signal.signal(sig, handler) for sig in INTERRUPT_SIGNALS}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
        _pending.clear()


def _stop(guard: subprocess.Popen[bytes]) -> None:
    """Tell the guard to end its group (the guard only: a second SIGTERM makes some children skip their shutdown)."""
    with contextlib.suppress(ProcessLookupError):
        guard.send_signal(signal.SIGTERM)


def start_guarded(cmd: Sequence[str], *, cwd: Path | None = None, env: Mapping[str, str] | None = None,
                  stdout: IO[Any] | int | None = None, grace_s: float = GRACE_S,
                  cpus: frozenset[int] | None = None) -> subprocess.Popen[bytes]:
    """Start ``cmd`` under the guard and return the guard; end it with :func:`finish_guarded` (which also stops it
    on any error). A stop signal inside :func:`stop_signals` stops every child started so and not yet finished.
    ``cpus``: pin the guard, and so everything it starts, to these cores."""

    def before() -> None:
        group_guard.die_with_parent()
        if cpus:
            os.sched_setaffinity(0, cpus)

    guard = [sys.executable, group_guard.__file__, str(os.getpid()), str(grace_s), "--", *cmd]
    proc = subprocess.Popen(guard, cwd=cwd, env=None if env is None else dict(env), stdout=stdout,
                            stderr=subprocess.STDOUT if stdout is not None else None, stdin=subprocess.DEVNULL,
                            start_new_session=True, preexec_fn=before)
    _running.append(proc)
    return proc


def finish_guarded(proc: subprocess.Popen[bytes], timeout_s: float | None = None, stop: bool = False) -> ChildExit:
    """Wait for a child of :func:`start_guarded` (stopping it first when ``stop``, or when ``timeout_s`` passes);
    :class:`Stopped` (after it ended) when a stop signal came meanwhile."""
    timed_out = False
    try:
        if stop:
            _stop(proc)
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            _stop(proc)
            code = proc.wait()
    except BaseException:  # a KeyboardInterrupt outside stop_signals(), or anything else: the child goes too
        _stop(proc)
        proc.wait()
        raise
    finally:
        if proc in _running:
            _running.remove(proc)
    if _pending:
        signum = _pending[0]
        _pending.clear()
        raise Stopped(signum)
    return ChildExit(code, timed_out)


def run_guarded(cmd: Sequence[str], *, cwd: Path | None = None, env: Mapping[str, str] | None = None,
                stdout: IO[Any] | int | None = None, timeout_s: float | None = None,
                grace_s: float = GRACE_S, foreground: bool = False) -> ChildExit:
    """Run ``cmd`` under the guard and wait; :class:`Stopped` (after it ended) when a stop signal came meanwhile.

    ``foreground``: no guard; the child stays in this process's group (a terminal's Ctrl-C reaches it), a SIGTERM to
    this process is passed on to it, a SIGINT left to it, and it is waited for to its end (a stopped pytest still
    writes its results), its exit code being this call's; past ``timeout_s`` it gets a SIGTERM and is waited for;
    when this process dies, even by SIGKILL, it gets a SIGTERM (what it started itself is its own to end)."""
    if foreground:
        return _run_foreground(cmd, cwd=cwd, env=env, stdout=stdout, timeout_s=timeout_s)
    return finish_guarded(start_guarded(cmd, cwd=cwd, env=env, stdout=stdout, grace_s=grace_s), timeout_s)


def _run_foreground(cmd: Sequence[str], *, cwd: Path | None, env: Mapping[str, str] | None,
                    stdout: IO[Any] | int | None, timeout_s: float | None) -> ChildExit:
    # subprocess.call() kills its child 0.25 s after a Ctrl-C, cutting the results file: here the child is never
    # killed, only told (SIGTERM), and a Ctrl-C is left to it (the terminal sends it to the child too; a second
    # one would interrupt pytest while it is saving).
    parent = os.getpid()
    child = subprocess.Popen(list(cmd), cwd=cwd, env=None if env is None else dict(env), stdout=stdout,
                             stderr=subprocess.STDOUT if stdout is not None else None,
                             preexec_fn=lambda: group_guard.die_with_parent(parent))

    def pass_on(signum: int, frame: Any) -> None:
        if signum == signal.SIGTERM and child.poll() is None:
            child.send_signal(signum)

    main = threading.current_thread() is threading.main_thread()  # signal handlers belong to the main thread
    previous = {sig: signal.signal(sig, pass_on) for sig in INTERRUPT_SIGNALS} if main else {}
    timed_out = False
    try:
        try:
            code = child.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            pass_on(signal.SIGTERM, None)
            code = child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return ChildExit(128 - code if code < 0 else code, timed_out)
