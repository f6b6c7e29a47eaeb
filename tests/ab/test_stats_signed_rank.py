"""The statistics of `batchperf ab`: the signed-rank interval, the verdict of an interval, and the sequential
level, whose honesty under peeking after every pair is checked by simulation (and shown to be needed)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from batchperf.ab.stats import signed_rank
from batchperf.ab.stats.signed_rank import Interval, call, process_noise, signed_rank_interval
from batchperf.regress.verdict import Verdict

finite = st.floats(min_value=-0.5, max_value=0.5, allow_nan=False, width=32)
samples = st.lists(finite, min_size=1, max_size=25, unique=True)


def test_interval_by_hand() -> None:
    # d = 1..10: Walsh averages are the 55 values (i+j)/2; HL = their median = 5.5. The exact two-sided
    # signed-rank test at 0.05 with n=10 rejects T <= 8, so the interval runs from the 9th smallest to the
    # 9th largest Walsh average: 3.0 and 8.0.
    d = np.arange(1.0, 11.0)
    iv = signed_rank_interval(d, 0.05)
    assert iv.n == 10 and iv.estimate == 5.5
    assert (iv.low, iv.high) == (3.0, 8.0)


def test_too_few_pairs_give_an_unbounded_interval() -> None:
    iv = signed_rank_interval([0.1, 0.2, 0.3], 0.05)  # smallest p with 3 pairs is 0.25
    assert iv.low == -math.inf and iv.high == math.inf
    assert signed_rank.min_pairs(0.05) == 6 and signed_rank.min_pvalue(6) <= 0.05 < signed_rank.min_pvalue(5)


@settings(max_examples=60, deadline=None)
@given(samples, st.sampled_from([0.01, 0.05, 0.2]))
def test_zero_is_outside_the_interval_exactly_when_the_test_rejects(d: list[float], level: float) -> None:
    d = [x for x in d if x != 0]
    if not d:
        return
    iv = signed_rank_interval(d, level)
    assert iv.low <= iv.estimate <= iv.high
    rejected = stats.wilcoxon(d, method="exact" if len(d) <= 50 else "asymptotic").pvalue <= level
    assert (not iv.low <= 0 <= iv.high) == rejected or 0 in (iv.low, iv.high)


@settings(max_examples=40, deadline=None)
@given(samples, st.floats(min_value=-1, max_value=1, allow_nan=False))
def test_interval_moves_with_a_shift(d: list[float], shift: float) -> None:
    # the signed-rank test drops exact zeros, so a value that a shift moves off (or onto) zero changes the data
    d = [x for x in d if abs(x) > 1e-9 and abs(x + shift) > 1e-9]
    if not d:
        return
    a = signed_rank_interval(d, 0.05)
    b = signed_rank_interval([x + shift for x in d], 0.05)
    assert b.estimate == pytest.approx(a.estimate + shift, abs=1e-6)
    for x, y in ((a.low, b.low), (a.high, b.high)):
        assert y == pytest.approx(x + shift, abs=1e-6) or (math.isinf(x) and x == y)


@settings(max_examples=40, deadline=None)
@given(samples)
def test_a_stricter_level_never_narrows_the_interval(d: list[float]) -> None:
    wide, narrow = signed_rank_interval(d, 0.01), signed_rank_interval(d, 0.1)
    assert wide.low <= narrow.low and wide.high >= narrow.high


def test_bad_input_is_named() -> None:
    with pytest.raises(ValueError, match="finite log-ratios"):
        signed_rank_interval([], 0.05)
    with pytest.raises(ValueError, match="finite log-ratios"):
        signed_rank_interval([0.1, math.nan], 0.05)


def _iv(low: float, high: float) -> Interval:
    return Interval(10, (low + high) / 2, math.log1p(low), math.log1p(high))


@pytest.mark.parametrize(("low", "high", "higher_is_better", "expected"), [
    (-0.02, 0.02, True, Verdict.NO_CHANGE),
    (-0.025, -0.005, True, Verdict.NO_CHANGE),  # significantly worse, but by less than the margin: no change
    (-0.10, -0.01, True, Verdict.REGRESSION),  # throughput down
    (0.01, 0.10, True, Verdict.IMPROVEMENT),
    (0.01, 0.10, False, Verdict.REGRESSION),  # latency up
    (-0.10, -0.01, False, Verdict.IMPROVEMENT),
    (-0.05, 0.04, True, Verdict.INCONCLUSIVE),
    (-0.02, 0.05, False, Verdict.INCONCLUSIVE),
])
def test_call_of_an_interval(low: float, high: float, higher_is_better: bool, expected: Verdict) -> None:
    assert call(_iv(low, high), higher_is_better, margin=0.03) is expected


def test_union_bound_counts_only_the_looks_that_can_reject() -> None:
    level = signed_rank.union_bound_level(30, 0.01)
    looks = sum(1 for n in range(1, 31) if signed_rank.min_pvalue(n) <= level)
    assert level == pytest.approx(0.01 / looks)


def sequential_false_alarms(draws: np.ndarray, level: float) -> float:
    """Share of null sequences in which some look 1..N has a p-value <= level (the interval excludes the truth)."""
    hit = np.zeros(len(draws), dtype=bool)
    for n in range(1, draws.shape[1] + 1):
        if signed_rank.min_pvalue(n) <= level:
            hit |= np.atleast_1d(stats.wilcoxon(draws[:, :n], axis=1).pvalue) <= level
    return float(hit.mean())


@pytest.mark.parametrize("law", ["normal", "heavy-tailed t(2)", "two-point outliers"])
def test_peeking_after_every_pair_keeps_the_error_honest(law: str) -> None:
    """The calibrated per-look level keeps P(any look excludes the true shift) <= alpha for any symmetric noise,
    with independent draws (another seed, other laws); a naive level (alpha at every look) does not."""
    max_pairs, alpha, sims = 20, 0.05, 6000
    rng = np.random.default_rng(7)
    if law == "normal":
        draws = rng.standard_normal((sims, max_pairs))
    elif law.startswith("heavy"):
        draws = rng.standard_t(2, (sims, max_pairs))
    else:  # mostly small noise, sometimes a process a neighbour slowed by 30%: symmetric about 0 still
        draws = rng.normal(0, 0.02, (sims, max_pairs)) + rng.choice([-0.3, 0.3], (sims, max_pairs)) * (
            rng.random((sims, max_pairs)) < 0.1)
    level, _ = signed_rank.per_look_level(max_pairs, alpha)
    slack = 3 * math.sqrt(alpha * (1 - alpha) / sims)  # Monte Carlo error of the check itself
    honest = sequential_false_alarms(draws, level)
    assert honest <= alpha + slack, f"{law}: {honest:.3f} false alarms at per-look level {level:.4f}"
    naive = sequential_false_alarms(draws, alpha)
    assert naive > 2 * alpha, f"{law}: peeking at level alpha every time gave only {naive:.3f}"


def test_per_look_level_is_cached_on_disk(tmp_path: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BATCHPERF_CACHE", str(tmp_path))
    signed_rank.per_look_level.cache_clear()
    level, how = signed_rank.per_look_level(12, 0.1)
    assert "simulated" in how and 0 < level < 0.1
    assert (tmp_path / signed_rank.LEVELS_FILE).exists()
    signed_rank.per_look_level.cache_clear()
    assert signed_rank.per_look_level(12, 0.1)[0] == level
    assert "union bound" in signed_rank.per_look_level(12, 1e-4)[1]
    with pytest.raises(ValueError, match="max_pairs"):
        signed_rank.per_look_level(0, 0.05)


def _argsort_level(max_pairs: int, alpha: float, sims: int) -> float:
    """The per-look level computed the plain way (ranks by double argsort, all draws at once): the reference."""
    data = np.random.default_rng(signed_rank.SEED).standard_normal((sims, max_pairs))
    smallest = np.ones(sims)
    for n in range(2, max_pairs + 1):
        head = data[:, :n]
        ranks = np.argsort(np.argsort(np.abs(head), axis=1), axis=1) + 1
        smallest = np.minimum(smallest, signed_rank.pvalue_table(n)[np.where(head > 0, ranks, 0).sum(axis=1)])
    candidates = np.unique(smallest)
    rates = np.searchsorted(np.sort(smallest), candidates, side="right") / sims
    return float(candidates[rates <= alpha][-1])


def test_the_incremental_simulation_gives_the_plain_one_s_level(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(signed_rank, "CHUNK", 700)  # several chunks, the last one short
    assert signed_rank.simulated_level(12, 0.05, 2500) == _argsort_level(12, 0.05, 2500)


def test_max_pairs_is_bounded() -> None:
    with pytest.raises(ValueError, match=f"max_pairs <= {signed_rank.MAX_PAIRS}"):
        signed_rank.per_look_level(signed_rank.MAX_PAIRS + 1, 0.05)
    with pytest.raises(ValueError, match="max_pairs must be"):
        signed_rank.simulated_level(100_000, 0.05, 1000)


def test_a_level_of_zero_admits_no_number_of_pairs() -> None:
    """A level of 0 (too few pairs to conclude) said "needs at least 1076 pairs": 2/2**n underflowing to 0."""
    assert signed_rank.min_pairs(0.0) is None and signed_rank.min_pairs(math.nan) is None
    assert signed_rank.min_pairs(2.0 ** -6) == 7 and signed_rank.min_pairs(0.05) == 6


def test_the_fewest_max_pairs_is_the_first_budget_that_can_conclude(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BATCHPERF_CACHE", str(tmp_path))
    signed_rank.per_look_level.cache_clear()
    family = 0.05 / 3  # one cell, the three default deciding metrics
    fewest = signed_rank.fewest_max_pairs(family)
    assert fewest == 7  # 2/2**7 = 0.0156 <= 0.0167 < 2/2**6
    assert signed_rank.per_look_level(fewest - 1, family)[0] < signed_rank.min_pvalue(fewest - 1)  # one fewer cannot
    assert signed_rank.min_pairs(signed_rank.per_look_level(fewest, family)[0]) == fewest


@pytest.mark.parametrize("planted", ["0.9", "NaN", "-0.1", "\"0.01\""])
def test_the_level_cache_is_not_trusted_with_an_impossible_level(tmp_path, monkeypatch: pytest.MonkeyPatch,
                                                                  planted: str) -> None:
    monkeypatch.setenv("BATCHPERF_CACHE", str(tmp_path))
    signed_rank.per_look_level.cache_clear()
    true_level, _ = signed_rank.per_look_level(12, 0.1)
    key = next(iter(__import__("json").loads((tmp_path / signed_rank.LEVELS_FILE).read_text())))
    (tmp_path / signed_rank.LEVELS_FILE).write_text("{\"" + key + "\": " + planted + "}")
    signed_rank.per_look_level.cache_clear()
    assert signed_rank.per_look_level(12, 0.1)[0] == true_level


@pytest.mark.parametrize("level", [0.0, 0.05])
def test_process_noise_separates_a_processs_own_level_from_its_rounds(level: float) -> None:
    """Simulated processes: rounds scatter by 10% about the process's level, which itself scatters by ``level``."""
    rng = np.random.default_rng(7)

    def process() -> list[float]:
        return list(np.exp(rng.normal(0.0, level) + rng.normal(0.0, 0.10, size=40)) * 800.0)

    found = process_noise([{"A": process(), "B": process()} for _ in range(300)])
    assert found is not None and found.processes == 600 and found.rounds == 40 and found.pairs == 300
    assert found.within == pytest.approx(0.10, rel=0.05)
    assert found.process == pytest.approx(level, abs=0.01)
    assert found.pair_sd == pytest.approx(found.predicted_pair_sd(40), rel=0.1)
    assert found.predicted_pair_sd(10) > found.predicted_pair_sd(40)


def test_process_noise_needs_three_pairs() -> None:
    assert process_noise([{"A": [1.0, 1.1], "B": [1.0, 0.9]}] * 2) is None
