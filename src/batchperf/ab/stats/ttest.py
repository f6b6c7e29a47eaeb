"""A group-sequential t-interval on the pairs' log-ratios, with Lan-DeMets alpha spending over the looks.

The second test of ``batchperf ab`` (``--test t``), beside the signed-rank one (:mod:`batchperf.ab.stats.signed_rank`).
At look ``n`` (after pair ``n``) the interval is ``mean ± c_n · s / sqrt(n)`` on ``d = ln(B/A)``, where the
critical values ``c_1 .. c_max`` are chosen so that, for normal pairs, P(some look's interval excludes the true
shift) is the spending function's share of ``alpha`` spent up to that look:

- **O'Brien-Fleming-type** (``obf``, the default): ``α(t) = 2 - 2Φ(z_{1-α/2} / sqrt(t))``, ``t = n / max_pairs``.
  The first looks keep almost nothing (at a third of the budget 1.4% of α), so the last look is
  judged at nearly the fixed-sample level: most of the power of a test that looks once, and a large effect
  still stops early.
- **Pocock-type** (``pocock``): ``α(t) = α · ln(1 + (e - 1) t)``: evenly spread, stops earlier on large
  effects, pays for it at the end.

The boundaries are found once by simulation (normal pairs, ``SEED``; the t statistic's law under the null
does not depend on the sd) and cached on disk beside the signed-rank levels: at each look, among the
simulated sequences not yet stopped, the largest ``|t|`` that keeps the cumulative false-alarm count at or
below the spending target. No look before ``MIN_PAIRS`` can decide (an sd from fewer pairs is too rough a
yardstick; alpha holds without the floor on the laws simulated, and O'Brien-Fleming spends almost nothing there). Beyond that floor, how many pairs a verdict
needs is set by the spread seen: the half-width ``c_n · s / sqrt(n)`` must clear the margin (or zero).

Calls, estimates and the disk cache follow :mod:`batchperf.ab.stats.signed_rank` (an :class:`~batchperf.ab.stats.signed_rank.Interval`
on the log scale, :func:`~batchperf.ab.stats.signed_rank.call`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from batchperf.ab.stats import signed_rank
from batchperf.ab.stats.signed_rank import Interval

SPENDING = ("obf", "pocock")
# no look before this can decide. Not needed for alpha on the laws simulated (floors 2..5 all keep it, docs/ab.md);
# a guard against an sd from 2-4 pairs under laws not simulated, and free: O'Brien-Fleming's |t| at look 4 of 14 is ~21
MIN_PAIRS = 5
SIMULATIONS = 200_000  # sequences behind the boundaries (at least MIN_EVENTS / alpha)
MIN_EVENTS = 2_000  # simulated false alarms behind the boundaries at the family alpha
MAX_SIMULATIONS = 2_000_000  # memory is O(simulations), time O(simulations x max_pairs)
SEED = 20_261_201
FILE_KEY = "t"  # the prefix of this test's entries in the levels cache


def spent(spending: str, fraction: float, alpha: float) -> float:
    """The share of ``alpha`` a Lan-DeMets spending function has spent at information ``fraction`` (0..1)."""
    from scipy import stats

    t = min(max(fraction, 0.0), 1.0)
    if t == 0:
        return 0.0
    if spending == "obf":
        return float(min(alpha, 2 - 2 * stats.norm.cdf(stats.norm.ppf(1 - alpha / 2) / math.sqrt(t))))
    if spending == "pocock":
        return float(alpha * math.log1p((math.e - 1) * t))
    raise ValueError(f"unknown spending function {spending!r}; known: {', '.join(SPENDING)}")


def check(max_pairs: int, alpha: float, spending: str) -> None:
    """ValueError naming the problem and the fix for settings no boundary can be made for."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be between 0 and 1 (exclusive), got {alpha}")
    if spending not in SPENDING:
        raise ValueError(f"unknown spending function {spending!r}; known: {', '.join(SPENDING)}")
    if not MIN_PAIRS <= max_pairs <= signed_rank.MAX_PAIRS:
        raise ValueError(f"max_pairs must be {MIN_PAIRS}..{signed_rank.MAX_PAIRS} for the t-test (no look before pair "
                         f"{MIN_PAIRS} decides), got {max_pairs}")


def simulated_boundaries(max_pairs: int, alpha: float, spending: str = "obf", sims: int = SIMULATIONS,
                         seed: int = SEED) -> tuple[float, ...]:
    """Critical ``|t|`` per look 1..max_pairs (inf: that look cannot decide) for normal pairs under the null.

    The running sums of the draws and of their squares give every look's t statistic with O(sims) memory; at
    each look the stopped sequences leave, and the boundary is the smallest that lets no more than the spending
    target's count (floored: never more) of all ``sims`` sequences have stopped so far.
    """
    check(max_pairs, alpha, spending)
    rng = np.random.default_rng(seed)
    total, squares = np.zeros(sims), np.zeros(sims)
    alive = np.ones(sims, dtype=bool)
    stopped = 0
    crit: list[float] = []
    for n in range(1, max_pairs + 1):
        x = rng.standard_normal(sims)
        total += x
        squares += x * x
        if n < MIN_PAIRS:
            crit.append(math.inf)
            continue
        mean = total / n
        sd = np.sqrt(np.maximum(squares - n * mean * mean, 0.0) / (n - 1))
        t = np.abs(mean) / (sd / math.sqrt(n))
        allowed = math.floor(spent(spending, n / max_pairs, alpha) * sims) - stopped
        live = t[alive]
        if allowed <= 0 or len(live) == 0:
            crit.append(math.inf)
            continue
        if allowed >= len(live):
            c = float(live.min())
        else:  # strictly above the (allowed+1)-th largest: at most `allowed` of the live ones reach it
            kth = np.partition(live, len(live) - allowed - 1)[len(live) - allowed - 1]
            c = float(np.nextafter(kth, math.inf))
        crit.append(c)
        hit = alive & (t >= c)
        stopped += int(hit.sum())
        alive &= ~hit
    return tuple(crit)


def simulations_for(alpha: float) -> int:
    return min(MAX_SIMULATIONS, max(SIMULATIONS, math.ceil(MIN_EVENTS / alpha)))


@lru_cache(maxsize=64)
def boundaries(max_pairs: int, alpha: float, spending: str = "obf") -> tuple[float, ...]:
    """:func:`simulated_boundaries` at the default size, cached on disk (``ab-levels.json``, keys ``t:…``)."""
    check(max_pairs, alpha, spending)
    sims = simulations_for(alpha)
    key = f"{FILE_KEY}:{spending}:{max_pairs}:{alpha:.6g}:{sims}:{SEED}:{MIN_PAIRS}"
    stored = signed_rank.cached(key, lambda entry: _plausible(entry, max_pairs), lambda: [
        c if math.isfinite(c) else None for c in simulated_boundaries(max_pairs, alpha, spending, sims)])
    return tuple(math.inf if c is None else float(c) for c in stored)


def _plausible(entry: object, max_pairs: int) -> bool:
    """A cached boundary list can be trusted: one entry per look, each None (no decision) or a number > 0."""
    return (isinstance(entry, list) and len(entry) == max_pairs
            and all(c is None or (isinstance(c, float) and c > 0 and math.isfinite(c)) for c in entry))


def first_look(crit: Sequence[float]) -> int | None:
    """The first look (1-based) that can decide; None when none can."""
    return next((n for n, c in enumerate(crit, 1) if math.isfinite(c)), None)


def t_interval(log_ratios: Sequence[float], crit: float) -> Interval:
    """``mean ± crit · s / sqrt(n)`` (the mean is the estimate); unbounded when ``crit`` is inf or n < 2."""
    d = np.asarray(log_ratios, dtype=float)
    if d.ndim != 1 or len(d) == 0 or not np.all(np.isfinite(d)):
        raise ValueError(f"need one or more finite log-ratios, got {list(d)}")
    mean = float(d.mean())
    if len(d) < 2 or not math.isfinite(crit):
        return Interval(len(d), mean, -math.inf, math.inf)
    half = crit * float(d.std(ddof=1)) / math.sqrt(len(d))
    return Interval(len(d), mean, mean - half, mean + half)
