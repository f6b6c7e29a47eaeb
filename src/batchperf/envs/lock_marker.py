"""The mark a locked environment carries: the sha256 of the ``requirements.lock`` it was built from, in a file
under its ``sys.prefix`` (written by ``python -m batchperf.envs.lock mark``). The fingerprint reads it as a soft
fact (:mod:`batchperf.regress.fingerprint`): two runs can tell they measured the same stack.

Standard library only: :mod:`batchperf.envs.lock` imports it, and ``make setup`` runs that with the system
interpreter before any environment exists.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

MARKER = "batchperf-lock.sha256"  # under an environment's sys.prefix: the sha256 of the lock it was built from


def installed_digest(prefix: str | None = None) -> str | None:
    """The sha256 of the lock this interpreter's environment was built from; None when it was not built from one."""
    try:
        text = (Path(prefix or sys.prefix) / MARKER).read_text().strip()
    except OSError:
        return None
    return text if re.fullmatch(r"[0-9a-f]{64}", text) else None
