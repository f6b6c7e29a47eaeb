"""Opening the files a refresh writes beside a committed baseline, never through a symbolic link.

A baselines folder is committed and shared, so a symlink in it (``history.jsonl -> ~/.bashrc``)
would make a refresh append to, or truncate, any file its user can write. Every file the store
opens for writing goes through :func:`open_regular`: ``O_NOFOLLOW`` refuses a symlink, and anything
but a regular file (a FIFO, a device) is refused too. The lock file is only ever ``flock``-ed,
never written (:mod:`batchperf.results.claim`), so even a hard link to a precious file is left as it was.
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
        raise open_problem(path, exc) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise open_problem(path, None)
    os.set_blocking(fd, True)
    return fd


def open_problem(path: Path, error: OSError | None) -> ResultsError:
    """Why ``path`` cannot be opened for writing: ``error`` from ``os.open``, or None for a non-regular file."""
    if error is None:
        return ResultsError(path, *_NOT_REGULAR)
    if error.errno == errno.ELOOP:
        return ResultsError(path, *_LINK)
    return ResultsError(path, f"cannot open it for writing ({error.strerror})",
                        "Check that the folder is writable, or pass another --baselines DIR")


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
