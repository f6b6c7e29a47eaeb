"""``--benchmark-json PATH`` checked before any cell is measured, and written by one pytest run at a time.

pytest-benchmark opens PATH only when the session ends: into a missing or read-only folder, every cell was
measured and then lost to a traceback. So the folder is tried now (a temporary file made and removed in it),
and a problem is a usage error before the first cell. Two runs writing one PATH at once kept one run's
cells, silently: each run holds an exclusive ``flock`` on ``.PATH.lock`` beside it for the session (released
by the OS if the run dies; the empty lock file stays, is never written, and is never followed as a link:
:mod:`batchperf.results.claim`), and a second run is refused, naming the first one's pid.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

import pytest

from batchperf.regress.safe_open import open_problem
from batchperf.results.claim import CannotOpen, Claim, ClaimError, Held, claim

LOCK = pytest.StashKey[Claim]()


def lock_path(path: Path) -> Path:
    return path.parent / f".{path.name}.lock"


def problem(path: Path) -> str | None:
    """Why pytest-benchmark could not write ``path`` at the end of the session; None when it can."""
    if path.is_dir():
        return f"is a folder; give a file path, e.g. {path / 'results.json'}"
    folder = path.parent
    if not folder.is_dir():
        return (f"the folder {folder} does not exist; create it first (the results are written when the session "
                "ends: every cell would be measured, then lost)")
    if path.is_symlink() or (path.exists() and not path.is_file()):
        return "is not a regular file (a link, a FIFO or a device); give a plain file path"
    try:
        fd, probe = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".probe", dir=folder)
    except OSError as exc:
        return (f"cannot write into {folder} ({exc.strerror}); give a writable folder (the results are written "
                "when the session ends: every cell would be measured, then lost)")
    os.close(fd)
    os.unlink(probe)
    if path.exists() and not os.access(path, os.W_OK):
        return "is read-only; give a writable file"
    return None


def hold(path: Path) -> Claim:
    """An exclusive, non-blocking claim on ``path``'s lock file; released when the session ends."""
    try:
        return claim(path.parent, lock_path(path).name, tidy=False)  # the empty lock file stays
    except CannotOpen as exc:
        raise pytest.UsageError(f"--benchmark-json {path}: {open_problem(exc.lock, exc.error)}") from None
    except Held as exc:
        raise pytest.UsageError(f"--benchmark-json {path}: another pytest run ({exc.reason}) is writing it; wait for "
                                "it to end or give another path (two runs into one file keep only one run's "
                                "cells)") from None
    except ClaimError as exc:  # the folder went away since problem() looked
        raise pytest.UsageError(f"--benchmark-json {path}: {exc.reason}") from None


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("benchmark_json", None)
    if path is None or hasattr(config, "workerinput"):  # an xdist worker writes nothing; its controller does
        return
    path = Path(path)
    if (why := problem(path)) is not None:
        raise pytest.UsageError(f"--benchmark-json {path}: {why}")
    config.stash[LOCK] = hold(path)


def pytest_unconfigure(config: pytest.Config) -> None:
    if (held := config.stash.get(LOCK, None)) is not None:
        with contextlib.suppress(OSError):
            held.release()
        del config.stash[LOCK]
