"""Opening the files a refresh writes beside a committed baseline, never through a symbolic link.

A baselines folder is committed and shared, so a symlink in it (``history.jsonl -> ~/.bashrc``)
would make a refresh append to, or truncate, any file its user can write. Every file the store
opens for writing goes through :func:`open_regular`: ``O_NOFOLLOW`` refuses a symlink, and anything
but a regular file (a FIFO, a device) is refused too. The lock file is only ever ``flock``-ed,
never written, so even a hard link to a precious file is left as it was.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from batchperf.results.record import ResultsError

_LINK = ("is a symbolic link; a baseline refresh never writes through one",
         "Replace it with a regular file and run again; nothing was written")
_NOT_REGULAR = ("is not a regular file", "Remove it and run again; nothing was written")


def open_regular(path: Path, flags: int, mode: int = 0o644) -> int:
    """``os.open(path, flags)`` refusing a symlink or a non-regular file; the caller closes the fd."""
    try:
        # O_NONBLOCK: opening a FIFO for writing would otherwise wait for a reader (no effect on files)
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ResultsError(path, *_LINK) from None
        raise ResultsError(path, f"cannot open it for writing ({exc.strerror})",
                           "Check that the folder is writable, or pass another --baselines DIR") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ResultsError(path, *_NOT_REGULAR)
    os.set_blocking(fd, True)
    return fd


def refuse_link(path: Path) -> None:
    """A ResultsError if ``path`` is a symlink or exists as anything but a regular file; creates nothing."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISLNK(mode):
        raise ResultsError(path, *_LINK)
    if not stat.S_ISREG(mode):
        raise ResultsError(path, *_NOT_REGULAR)


def make_folder(folder: Path) -> None:
    """``mkdir -p folder`` as a ResultsError naming the folder when it cannot be made."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ResultsError(folder, f"cannot create the baseline folder ({exc.strerror})",
                           "Pass a writable folder with --baselines DIR") from None


def flock_holder(fd: int) -> str:
    """``pid N`` of the process holding a ``flock`` on ``fd``'s file, from /proc/locks (Linux); else ``unknown``."""
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
