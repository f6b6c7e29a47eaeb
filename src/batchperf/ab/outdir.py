"""The output folder of one ``batchperf ab`` run: new or empty, held by one run at a time.

Two runs into one folder read each other's ``pair-NNN-*`` files (a 50% slowdown came out inconclusive),
and a re-run into a used folder mixed its pairs with the old ones. So a run takes the folder only when it
is new or empty, and holds it (:func:`batchperf.results.claim.claim` on ``OUT/.ab.lock``) until it ends; a second
run is refused at once, naming the run that holds it. Files a run writes itself are created exclusively
(``O_EXCL | O_NOFOLLOW``) or replaced atomically, so a symlink planted in the folder is never written
through. Resuming a run is not supported: a folder that holds anything is refused.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from batchperf.results.claim import CannotMake, Claim, ClaimError, Held, NotAFolder
from batchperf.results.claim import claim as hold

LOCK = ".ab.lock"


class OutProblem(ValueError):
    """The folder cannot hold this run; the message names it, the problem and the fix (a usage error)."""


def claim(out: Path) -> Claim:
    """Make or take ``out`` for one run and lock it; :class:`OutProblem` when it cannot be this run's alone."""
    lock_was_there = os.path.lexists(out / LOCK)
    try:
        folder = hold(out, LOCK)
    except ClaimError as exc:
        raise OutProblem(_refusal(out, exc)) from None
    if held := folder.others():
        if not lock_was_there:
            with contextlib.suppress(OSError):
                folder.lock.unlink()
        folder.release()
        shown = ", ".join(held[:4]) + (f" and {len(held) - 4} more" if len(held) > 4 else "")
        raise OutProblem(f"--out {out}: already holds {shown}; a run starts only in a new or empty folder, so that "
                         "no run reads another's pairs (resuming is not supported): give a new --out")
    return folder


def _refusal(out: Path, exc: ClaimError) -> str:
    if isinstance(exc, NotAFolder):
        return f"--out {out}: is a file, not a folder; give a new folder (or leave --out out)"
    if isinstance(exc, CannotMake):
        return f"--out {out}: cannot make the folder ({exc.reason}); give a folder you can write"
    if isinstance(exc, Held):
        return (f"--out {out}: another batchperf ab run ({exc.reason}) is writing there; wait for it to end, or give "
                "another --out")
    return f"--out {out}: cannot write there ({exc.reason}); give a folder you can write"  # CannotOpen


def create_new(path: Path) -> int:
    """A new file's descriptor for writing; FileExistsError (or ELOOP) for anything already there, links too."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
