"""The output folder of one ``batchperf ab`` run: new or empty, held by one run at a time.

Two runs into one folder read each other's ``pair-NNN-*`` files (a 50% slowdown came out inconclusive),
and a re-run into a used folder mixed its pairs with the old ones. So a run takes the folder only when it
is new or empty, and holds an exclusive ``fcntl`` lock on ``OUT/.ab.lock`` until it ends; a second run
is refused at once, naming the run that holds it. Files a run writes itself are created exclusively
(``O_EXCL | O_NOFOLLOW``) or replaced atomically, so a symlink planted in the folder is never written
through. Resuming a run is not supported: a folder that holds anything is refused.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

LOCK = ".ab.lock"


class OutProblem(ValueError):
    """The folder cannot hold this run; the message names it, the problem and the fix (a usage error)."""


class OutFolder:
    """A claimed output folder; :meth:`release` unlocks it (and removes it when the run wrote nothing)."""

    def __init__(self, path: Path, created: bool, fd: int) -> None:
        self.path, self.created, self._fd = path, created, fd

    def release(self) -> None:
        """Unlock; a folder this run made, or found empty, and left holding only its lock is cleaned up."""
        if self._fd < 0:
            return
        try:
            if self.holds_nothing():
                with contextlib.suppress(OSError):
                    (self.path / LOCK).unlink()
                    if self.created:
                        self.path.rmdir()
        finally:
            fd, self._fd = self._fd, -1
            os.close(fd)  # closing drops the lock

    def holds_nothing(self) -> bool:
        try:
            return [p.name for p in self.path.iterdir()] == [LOCK]
        except OSError:
            return False

    def __enter__(self) -> OutFolder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def claim(out: Path) -> OutFolder:
    """Make or take ``out`` for one run and lock it; :class:`OutProblem` when it cannot be this run's alone."""
    if out.exists() and not out.is_dir():
        raise OutProblem(f"--out {out}: is a file, not a folder; give a new folder (or leave --out out)")
    created = not out.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutProblem(f"--out {out}: cannot make the folder ({exc.strerror or exc}); give a folder you can "
                         "write") from None
    lock_was_there = os.path.lexists(out / LOCK)
    try:
        fd = os.open(out / LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        _forget(out, created)
        raise OutProblem(f"--out {out}: cannot write there ({exc.strerror or exc}); give a folder you can "
                         "write") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        owner = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise OutProblem(f"--out {out}: another batchperf ab run (pid {owner}) is writing there; wait for it to "
                         "end, or give another --out") from None
    folder = OutFolder(out, created, fd)
    if held := sorted(p.name for p in out.iterdir() if p.name != LOCK):
        if not lock_was_there:
            with contextlib.suppress(OSError):
                (out / LOCK).unlink()
        folder.release()
        shown = ", ".join(held[:4]) + (f" and {len(held) - 4} more" if len(held) > 4 else "")
        raise OutProblem(f"--out {out}: already holds {shown}; a run starts only in a new or empty folder, so that "
                         "no run reads another's pairs (resuming is not supported): give a new --out")
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return folder


def _forget(out: Path, created: bool) -> None:
    if created:
        with contextlib.suppress(OSError):
            out.rmdir()


def create_new(path: Path) -> int:
    """A new file's descriptor for writing; FileExistsError (or ELOOP) for anything already there, links too."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
