"""The test that turns a metric's pairs into an interval at each look: signed-rank or the sequential t (``--test``).

One :class:`SequentialTest` per run, made once for the run's family error (``alpha`` over cells × deciding metrics)
and budget (``max_pairs``) by :func:`make_test`, recorded in ``ab.json`` (:meth:`SequentialTest.to_dict`) so a replay
(``tools/ab_detector.py``) judges exactly as the run did (:func:`recorded_test`).

- ``signed-rank``: :func:`batchperf.ab.stats.signed_rank.signed_rank_interval` at Pocock's constant per-look level
  (:func:`batchperf.ab.stats.signed_rank.per_look_level`); honest for any symmetric noise.
- ``t``: :func:`batchperf.ab.stats.ttest.t_interval` at Lan-DeMets O'Brien-Fleming-type boundaries
  (:func:`batchperf.ab.stats.ttest.boundaries`); exact for normal pairs, conservative for the heavy-tailed laws
  simulated in docs/ab.md; more power at the end of a fixed budget, later calls (docs/ab.md, "Which test").
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from batchperf.ab.stats import signed_rank, ttest
from batchperf.ab.stats.signed_rank import Interval

TESTS = ("signed-rank", "t")
# resolves sooner at the same alpha and budget (fewer pairs spent on average), and far better with outliers;
# the t-test catches more by the end of a fixed budget of near-normal pairs (docs/ab.md, "Which test")
DEFAULT_TEST = "signed-rank"


@dataclass(frozen=True, slots=True)
class SequentialTest:
    """The interval of each look at a metric's log-ratios: the test, and its per-look level or boundaries."""

    test: str  # one of TESTS
    level: float | None = None  # signed-rank: the per-look level
    crit: tuple[float, ...] = ()  # t: the critical |t| per look (inf: that look cannot decide)
    method: str = ""  # how the level or boundaries were found

    def interval(self, log_ratios: Sequence[float]) -> Interval:
        if self.test == "signed-rank":
            return signed_rank.signed_rank_interval(log_ratios, self.level or 0.0)
        n = len(log_ratios)
        return ttest.t_interval(log_ratios, self.crit[n - 1] if n <= len(self.crit) else self.crit[-1])

    @property
    def needs(self) -> int | None:
        """Fewest pairs whose interval can exclude anything; None when no number of pairs can."""
        if self.test == "signed-rank":
            return signed_rank.min_pairs(self.level or 0.0)
        return ttest.first_look(self.crit)

    def describe(self) -> str:
        if self.test == "signed-rank":
            return f"Wilcoxon signed-rank on ln(B/A) per pair, Hodges-Lehmann estimate, per-look level {self.level:.4g}"
        last = self.crit[-1] if self.crit else math.inf
        first = self.needs
        return (f"sequential t-interval on ln(B/A) per pair, mean estimate, O'Brien-Fleming-type alpha spending "
                f"(|t| {self.crit[first - 1]:.3g} at pair {first} … {last:.3g} at pair {len(self.crit)})"
                if first else "sequential t-interval: no look can decide")

    def to_dict(self) -> dict[str, Any]:
        return {"test": self.test, "per_look_level": self.level,
                "t_boundaries": [c if math.isfinite(c) else None for c in self.crit] or None}


def make_test(test: str, max_pairs: int, family: float) -> SequentialTest:
    """The sequential test ``test`` for a budget of ``max_pairs`` looks at family error ``family`` (per metric and
    cell)."""
    if test == "signed-rank":
        level, how = signed_rank.per_look_level(max_pairs, family)
        return SequentialTest(test, level=level, method=how)
    if test == "t":
        crit = ttest.boundaries(max_pairs, family, "obf")
        return SequentialTest(test, crit=crit, method=f"simulated ({ttest.simulations_for(family)} sequences)")
    raise ValueError(f"unknown test {test!r}; known: {', '.join(TESTS)}")


def one_look(test: str, pairs: int, level: float) -> SequentialTest:
    """``test``'s interval judged once, over all ``pairs``, at two-sided ``level``: the fixed-sample t (|t| at
    1 - level / 2 with pairs - 1 degrees of freedom), or signed-rank at ``level``. For a figure that makes no call
    (:mod:`batchperf.releases.explain`), not for a run's looks: those are :func:`make_test`'s."""
    if test == "t":
        from scipy import stats

        crit = float(stats.t.ppf(1 - level / 2, pairs - 1)) if pairs > 1 else math.inf
        return SequentialTest("t", crit=(crit,), method=f"one look at {1 - level:.0%}")
    if test == "signed-rank":
        return SequentialTest("signed-rank", level=level, method=f"one look at {1 - level:.0%}")
    raise ValueError(f"unknown test {test!r}; known: {', '.join(TESTS)}")


def fewest_max_pairs(test: str, family: float) -> int:
    """The smallest budget whose test can give a verdict at some look."""
    if test == "signed-rank":
        return signed_rank.fewest_max_pairs(family)
    for m in range(ttest.MIN_PAIRS, signed_rank.MAX_PAIRS + 1):
        if ttest.first_look(ttest.boundaries(m, family, "obf")) is not None:
            return m
    return signed_rank.MAX_PAIRS + 1


def recorded_test(settings: Mapping[str, Any]) -> SequentialTest:
    """The sequential test an ``ab.json``'s settings record (one written before ``--test`` existed: signed-rank)."""
    test = settings.get("test", "signed-rank")
    if test == "t":
        return SequentialTest("t", crit=tuple(math.inf if c is None else float(c) for c in settings["t_boundaries"]))
    return SequentialTest("signed-rank", level=float(settings["per_look_level"]))
