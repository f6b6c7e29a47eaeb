"""Argparse types for the real numbers the subcommands take: finite and in range, or a usage error.

``type=float`` takes ``nan`` and ``inf``, which then failed later with a traceback, or not at all
(``history --penalty nan`` compared every change with NaN, silently). These fail at parse time, as
argparse reports any bad argument: ``argument --penalty: must be a finite number > 0, got 'nan'``.
(Whole numbers need no such type: ``type=int`` already refuses ``nan``; each command checks their range.)
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


def real(low: float = 0.0, above: bool = False) -> Callable[[str], float]:
    """A finite number >= ``low`` (> ``low`` with ``above``)."""
    bound = f"{'>' if above else '>='} {low:g}"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value < low or (above and value == low):
            raise argparse.ArgumentTypeError(f"must be a finite number {bound}, got {text!r}")
        return value

    return parse
