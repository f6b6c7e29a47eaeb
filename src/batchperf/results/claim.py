"""A folder held by one process at a time: an exclusive, non-blocking ``flock`` on a lock file inside it.

``batchperf ab`` (``OUT/.ab.lock``), ``batchperf chain`` (``OUT/.chain.lock``), a baseline refresh
(``FOLDER/.refresh.lock``) and a pytest run's ``--benchmark-json`` (``.NAME.lock`` beside it) each take their
folder with :func:`claim`, and word its refusals for their own users (:class:`ClaimError` says what went wrong,
they say what to do). The OS drops the lock when its holder dies, so a crash never leaves a folder held. The lock
file is opened without following a link, refused unless it is a regular file, and never written: it may be a
committed file, or a hard link to one that matters (a baselines folder is committed and shared).

It lives in ``results``, the lowest stage all its users may import, beside the atomic writes of the files those
folders hold (:func:`batchperf.results.io.atomic_write_text`).
"""

from __future__ import annotations

import contextlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path


class ClaimError(Exception):
    """``folder`` could not be claimed; ``reason`` says why in a few words (an errno's text, or the holder)."""

    def __init__(self, folder: Path, reason: str) -> None:
        super().__init__(f"{folder}: {reason}")
        self.folder, self.reason = folder, reason


class NotAFolder(ClaimError):
    """The path is a file (or anything but a folder)."""


class CannotMake(ClaimError):
    """The folder does not exist and cannot be made."""


class CannotOpen(ClaimError):
    """The lock file cannot be opened: ``error`` is the OSError (ELOOP for a link), None when it is not a regular
    file (a FIFO, a device)."""

    def __init__(self, folder: Path, lock: Path, error: OSError | None) -> None:
        super().__init__(folder, "is not a regular file" if error is None else error.strerror or str(error))
        self.lock, self.error = lock, error


class Held(ClaimError):
    """Another process holds the folder; ``reason`` names it (``pid N``, or ``pid unknown``)."""


@dataclass(slots=True)
class Claim:
    """A held folder; :meth:`release` (or leaving the ``with`` block) lets it go."""

    folder: Path
    lock: Path
    created: bool  # this claim made the folder
    tidy: bool  # on release, a folder holding only the lock loses the lock (and the folder, if this claim made it)
    fd: int

    def others(self) -> list[str]:
        """The names in the folder besides the lock file, sorted."""
        return sorted(p.name for p in self.folder.iterdir() if p != self.lock)

    def release(self) -> None:
        if self.fd < 0:
            return
        try:
            if self.tidy and self._holds_nothing():
                with contextlib.suppress(OSError):
                    self.lock.unlink()
                    if self.created:
                        self.folder.rmdir()
        finally:
            fd, self.fd = self.fd, -1
            os.close(fd)  # closing drops the lock

    def _holds_nothing(self) -> bool:
        try:
            return self.others() == []
        except OSError:
            return False

    def __enter__(self) -> Claim:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def claim(folder: Path, lock: str, *, tidy: bool = True) -> Claim:
    """Make ``folder`` if needed and hold it through ``folder/lock``; a :class:`ClaimError` when it cannot be held
    (then a folder this call made is gone again)."""
    import fcntl  # POSIX only: imported here so that reading results (this package) still works elsewhere

    if folder.exists() and not folder.is_dir():
        raise NotAFolder(folder, "is a file, not a folder")
    created = not folder.exists()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CannotMake(folder, exc.strerror or str(exc)) from None
    path = folder / lock
    try:
        fd = _open_regular(path)
    except OSError as exc:
        _forget(folder, created)
        raise CannotOpen(folder, path, exc) from None
    if fd < 0:
        _forget(folder, created)
        raise CannotOpen(folder, path, None)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = flock_holder(fd)
        os.close(fd)
        raise Held(folder, holder) from None
    return Claim(folder, path, created, tidy, fd)


def _open_regular(path: Path) -> int:
    """The lock file's descriptor, made if missing; -1 when it exists as anything but a regular file."""
    # O_NONBLOCK: opening a FIFO would otherwise wait for a peer (no effect on a regular file)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o644)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return -1
    os.set_blocking(fd, True)
    return fd


def _forget(folder: Path, created: bool) -> None:
    if created:
        with contextlib.suppress(OSError):
            folder.rmdir()


def flock_holder(fd: int) -> str:
    """``pid N`` of the process holding a ``flock`` on ``fd``'s file, from /proc/locks (Linux); else ``pid unknown``."""
    info = os.fstat(fd)
    # /proc/locks: "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF" (device major:minor in hex, inode)
    inode = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as fh:
            for line in fh:
                fields = line.split()
                if "FLOCK" in fields and inode in fields and "->" not in fields:
                    return f"pid {fields[fields.index(inode) - 1]}"
    except OSError:
        pass
    return "pid unknown"
