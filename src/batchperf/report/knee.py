"""The knee of a throughput curve: where adding batch size stops paying.

Rule (documented in ``docs/reports.md``): the knee is the *smallest batch size
whose throughput reaches at least ``fraction`` (default 90%) of the curve's
maximum*. Past it, a larger batch buys at most the remaining 10% of throughput
while latency keeps growing, which is what the batch-size studies observe
(gains flatten past ~32 while P99 latency climbs). Unlike curvature rules
(Kneedle), it is defined for the 3–6 points a sweep has and does not move when
one more, larger batch size is added to a flat curve.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

KNEE_FRACTION = 0.9


def knee(xs: Sequence[float], ys: Sequence[float], fraction: float = KNEE_FRACTION) -> float | None:
    """The smallest ``x`` whose ``y`` is >= ``fraction`` × max(y); None when no point has a finite y."""
    if len(xs) != len(ys):
        raise ValueError(f"xs and ys differ in length: {len(xs)} vs {len(ys)}")
    if not 0 < fraction <= 1:
        raise ValueError(f"knee fraction must be in (0, 1], got {fraction}")
    points = sorted((x, y) for x, y in zip(xs, ys) if y is not None and math.isfinite(y))
    if not points:
        return None
    top = max(y for _, y in points)
    return next(x for x, y in points if y >= fraction * top)
