"""The statistics behind ``batchperf ab``: paired log-ratios, a signed-rank interval, an honest sequential level.

Each pair of fresh processes (one in A, one in B, in alternating order) gives one log-ratio
``d = ln(B / A)`` of a metric. On those:

- **Estimate and interval**: the Hodges-Lehmann estimate (median of the Walsh averages) and the
  interval that inverts the Wilcoxon signed-rank test (``scipy.stats.wilcoxon``): every shift ``δ``
  that the test does not reject on ``d - δ``. It assumes only that ``d`` is symmetric about its
  centre, which an A/A comparison satisfies by construction (A and B swap order every pair), so its
  false-alarm rate does not depend on how this machine's noise is distributed, and one process that
  a neighbour slowed by 30% moves it by one rank, not by 30%.
- **Sequential level**: ``ab`` looks after every pair and stops as soon as the answer is clear. An
  interval computed at level ``1 - α`` at every look would miss far more often than ``α``. Under the
  null the signs of the ranks are fair coins whatever the noise, so the per-look level ``α'`` that
  keeps P(any look rejects) ≤ ``α`` over ``max_pairs`` looks is found once by simulation
  (:func:`per_look_level`, Pocock's constant-level design), and holds for every cell. Below
  ``MIN_SIMULATED_ALPHA`` the simulation would be too long and a union bound over the looks that
  could reject is used instead (honest, more conservative).

Everything is on the log scale; :func:`relative` turns a log-ratio into a relative change.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from batchperf.launch.environ import cache_root
from batchperf.regress.verdict import Verdict

SIMULATIONS = 20_000  # sequences simulated for the per-look level (at least MIN_EVENTS / alpha)
MIN_EVENTS = 200  # simulated rejections behind the level, so its Monte Carlo error is a few percent
MAX_SIMULATIONS = 120_000
MIN_SIMULATED_ALPHA = MIN_EVENTS / MAX_SIMULATIONS  # below: the union bound
SEED = 20_260_101
LEVELS_FILE = "ab-levels.json"
MAX_PAIRS = 100  # --max-pairs at most: the level's simulation stays within seconds and ~100 MB
CHUNK = 10_000  # sequences simulated at once (memory: CHUNK x max_pairs draws)


def relative(log_ratio: float) -> float:
    """ln(B/A) -> B/A - 1."""
    return math.expm1(log_ratio) if math.isfinite(log_ratio) else math.copysign(math.inf, log_ratio)


@dataclass(frozen=True, slots=True)
class Interval:
    """Hodges-Lehmann estimate and signed-rank interval of the log-ratios (log scale; ±inf: unbounded)."""

    n: int
    estimate: float
    low: float
    high: float

    @property
    def width(self) -> float:
        """Width of the interval as a relative change (high - low after expm1), inf when unbounded."""
        return relative(self.high) - relative(self.low)


def signed_rank_interval(log_ratios: Sequence[float], alpha: float) -> Interval:
    """The shifts not rejected by the two-sided signed-rank test at level ``alpha``; the HL estimate.

    The test's statistic changes only at Walsh averages, so it is evaluated once between each two
    neighbouring (distinct) Walsh averages and once beyond each end; the interval runs from the Walsh
    average below the first accepted region to the one above the last.
    """
    from scipy import stats

    d = np.asarray(log_ratios, dtype=float)
    if d.ndim != 1 or len(d) == 0 or not np.all(np.isfinite(d)):
        raise ValueError(f"need one or more finite log-ratios, got {list(d)}")
    i, j = np.triu_indices(len(d))
    walsh = (d[i] + d[j]) / 2
    estimate = float(np.median(walsh))
    edges = np.unique(walsh)
    spread = max(float(edges[-1] - edges[0]), abs(estimate), 1.0)
    probes = np.concatenate(([edges[0] - spread], (edges[:-1] + edges[1:]) / 2, [edges[-1] + spread]))
    shifted = d[None, :] - probes[:, None]
    # scipy's "auto" picks the exact law (n <= 50) unless ANY row of the batch has a tie or a zero (rounding can
    # make one), and then runs a permutation test per row: minutes for a few hundred rows. The exact law is
    # used explicitly instead; with ties scipy rounds the statistic conservatively (gh-19872), so it stays honest.
    method = "exact" if len(d) <= 50 else "asymptotic"
    pvalues = np.atleast_1d(stats.wilcoxon(shifted, axis=1, method=method).pvalue)
    accepted = np.flatnonzero(pvalues > alpha)
    if len(accepted) == 0:  # cannot happen for the region holding the estimate; kept for safety
        return Interval(len(d), estimate, estimate, estimate)
    first, last = int(accepted[0]), int(accepted[-1])
    low = -math.inf if first == 0 else float(edges[first - 1])
    high = math.inf if last == len(edges) else float(edges[last])
    return Interval(len(d), estimate, low, high)


def min_pvalue(n: int) -> float:
    """The smallest two-sided signed-rank p-value n pairs can give (all signs alike): 2 / 2**n."""
    return min(1.0, 2.0 ** (1 - n))


def min_pairs(level: float) -> int | None:
    """Fewest pairs whose interval can exclude anything at per-look ``level``; None when no number can (level 0)."""
    if not level > 0:  # 0 (or NaN): 2 / 2**n reaches 0 only by underflow, at n = 1076
        return None
    n = 1
    while min_pvalue(n) > level:
        n += 1
    return n


def fewest_max_pairs(alpha: float) -> int:
    """The smallest ``--max-pairs`` whose per-look level at family error ``alpha`` lets some look give a verdict.

    A budget of m pairs can conclude when its level admits the p-value of all m signs alike (2 / 2**m); with
    fewer looks that can reject the level is higher, so the first m that can is found by trying them in turn.
    """
    m = min_pairs(alpha) or MAX_PAIRS + 1  # with one look at level alpha: a lower bound
    while m <= MAX_PAIRS:
        needed = min_pairs(per_look_level(m, alpha)[0])
        if needed is not None and needed <= m:
            return m
        m += 1
    return m


def union_bound_level(max_pairs: int, alpha: float) -> float:
    """α divided over the looks that could reject at the result (a fixed point: fewer looks, higher level)."""
    level = alpha
    for _ in range(64):
        looks = sum(1 for n in range(1, max_pairs + 1) if min_pvalue(n) <= level)
        new = alpha / max(looks, 1)
        if new == level:
            break
        level = new
    return level


def pvalue_table(n: int) -> np.ndarray:
    """scipy's two-sided signed-rank p-value for n distinct nonzero differences, indexed by T+ (0 .. n(n+1)/2).

    One vectorised ``scipy.stats.wilcoxon`` call on data made to have each T+: ranks 1..n, the ones
    summing to T+ positive (taken greedily from the largest), the rest negative.
    """
    from scipy import stats

    total = n * (n + 1) // 2
    signs = -np.ones((total + 1, n))
    for t in range(total + 1):
        left = t
        for rank in range(n, 0, -1):
            if rank <= left:
                signs[t, rank - 1] = 1.0
                left -= rank
    data = signs * np.arange(1, n + 1)
    return np.atleast_1d(stats.wilcoxon(data, axis=1).pvalue)


def simulated_level(max_pairs: int, alpha: float, sims: int, seed: int = SEED) -> float:
    """The largest per-look level whose simulated P(any of the looks 1..max_pairs rejects a true null) ≤ alpha.

    Under the null the signed-rank statistic's law does not depend on the noise (any symmetric law gives
    the same), so normal draws stand for all; each look's p-value is scipy's, looked up by T+. T+ is kept up
    to date look by look (a new draw shifts the rank of every larger earlier one by one), and the sequences
    are drawn ``CHUNK`` at a time: time O(sims x max_pairs²), memory O(CHUNK x max_pairs).
    """
    if not 1 <= max_pairs <= MAX_PAIRS:
        raise ValueError(f"max_pairs must be 1..{MAX_PAIRS}, got {max_pairs}")
    rng = np.random.default_rng(seed)
    tables = {n: pvalue_table(n) for n in range(1, max_pairs + 1) if min_pvalue(n) < 1.0}
    smallest = np.ones(sims)
    for start in range(0, sims, CHUNK):
        data = rng.standard_normal((min(CHUNK, sims - start), max_pairs))
        size, positive = np.abs(data), data > 0
        t_plus = np.zeros(len(data), dtype=np.int64)
        low = smallest[start:start + len(data)]
        for n in range(1, max_pairs + 1):
            new = size[:, n - 1:n]
            larger = size[:, :n - 1] > new  # earlier draws whose rank goes up by one
            rank = 1 + (size[:, :n - 1] < new).sum(axis=1)
            t_plus += (larger & positive[:, :n - 1]).sum(axis=1) + np.where(positive[:, n - 1], rank, 0)
            if n in tables:
                np.minimum(low, tables[n][t_plus], out=low)
    candidates = np.unique(smallest)
    rates = np.searchsorted(np.sort(smallest), candidates, side="right") / sims
    ok = candidates[rates <= alpha]
    return float(ok[-1]) if len(ok) else 0.0


def cache_file() -> Path:
    return cache_root() / LEVELS_FILE


def cached(key: str, plausible: Callable[[object], bool], compute: Callable[[], Any]) -> Any:
    """The value stored under ``key`` in :func:`cache_file`, or, when it is absent or not ``plausible``,
    ``compute()``'s, stored there (a cache only: one that cannot be written is computed again next time)."""
    path = cache_file()
    try:
        stored = json.loads(path.read_text())
    except (OSError, ValueError):
        stored = {}
    stored = stored if isinstance(stored, dict) else {}
    if not plausible(stored.get(key)):
        stored[key] = compute()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(stored, indent=1, sort_keys=True))
            os.replace(tmp, path)
        except OSError:
            pass
    return stored[key]


@lru_cache(maxsize=64)
def per_look_level(max_pairs: int, alpha: float) -> tuple[float, str]:
    """(per-look level, how it was found) for up to ``max_pairs`` looks at family error ``alpha``; cached on disk."""
    if not 1 <= max_pairs <= MAX_PAIRS or not 0 < alpha < 1:
        raise ValueError(f"need 1 <= max_pairs <= {MAX_PAIRS} and 0 < alpha < 1, got {max_pairs}, {alpha}")
    if alpha < MIN_SIMULATED_ALPHA:
        return union_bound_level(max_pairs, alpha), "union bound over the looks"
    sims = min(MAX_SIMULATIONS, max(SIMULATIONS, math.ceil(MIN_EVENTS / alpha)))
    key = f"{max_pairs}:{alpha:.6g}:{sims}:{SEED}"
    level = cached(key, lambda entry: _plausible(entry, alpha), lambda: simulated_level(max_pairs, alpha, sims))
    return level, f"simulated ({sims} sequences)"


def _plausible(level: object, alpha: float) -> bool:
    """A cached level can be trusted: a finite number in [0, alpha] (a per-look level never exceeds the family's)."""
    return isinstance(level, float) and 0.0 <= level <= alpha


def call(interval: Interval, higher_is_better: bool, margin: float) -> Verdict:
    """The verdict of one metric's interval: inside ±margin is no change (even if it excludes 0); else a side."""
    low, high = relative(interval.low), relative(interval.high)
    if -margin <= low and high <= margin:
        return Verdict.NO_CHANGE
    worse_side = high < 0 if higher_is_better else low > 0
    better_side = low > 0 if higher_is_better else high < 0
    if worse_side:
        return Verdict.REGRESSION
    if better_side:
        return Verdict.IMPROVEMENT
    return Verdict.INCONCLUSIVE


@dataclass(frozen=True, slots=True)
class ProcessNoise:
    """Where a metric's noise is, on the log scale: a round about its process's mean, and a process's own level.

    ``within`` is the pooled sd of a round about its process's mean; ``process`` the sd of a process's mean beyond
    what its rounds explain, from the two processes of each pair (close in time, so slow drift common to both is
    not counted): var(d) = 2 process^2 + 2 within^2 / rounds for a pair's mean-round difference d.
    """

    processes: int
    rounds: float  # the median count of rounds a process
    within: float
    process: float
    pairs: int
    pair_sd: float  # measured: sd over pairs of the difference of the two processes' mean rounds

    def predicted_pair_sd(self, rounds: float) -> float:
        """sd of a pair's ln(B/A) with ``rounds`` rounds a process (each summarised by its mean round)."""
        return math.sqrt(2 * (self.process**2 + self.within**2 / rounds))


def process_noise(pairs: Sequence[dict[str, Sequence[float]]]) -> ProcessNoise | None:
    """The decomposition of :class:`ProcessNoise` from pairs of processes, each ``{"A": rounds, "B": rounds}`` of
    one metric's per-round values (positive; taken on the log scale). None with fewer than three of either."""
    logs = [{side: [math.log(v) for v in values] for side, values in p.items()} for p in pairs]
    groups = [g for p in logs for g in p.values() if len(g) > 1]
    diffs = [float(np.mean(p["B"]) - np.mean(p["A"])) for p in logs if len(p.get("A", ())) and len(p.get("B", ()))]
    if len(groups) < 3 or len(diffs) < 3:
        return None
    k = float(np.median([len(g) for g in groups]))
    within = float(np.mean([np.var(g, ddof=1) for g in groups]))
    pair_var = float(np.var(diffs, ddof=1))
    between = max(pair_var / 2 - within / k, 0.0)
    return ProcessNoise(len(groups), k, math.sqrt(within), math.sqrt(between), len(diffs), math.sqrt(pair_var))
