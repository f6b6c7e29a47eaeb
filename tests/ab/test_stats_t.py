"""The sequential t-interval (``--test t``): its false-alarm rate under peeking, by simulation with the laws
tests/ab/test_stats_signed_rank.py uses, its spending boundaries, its interval, and bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from batchperf.ab.stats import ttest


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("BATCHPERF_CACHE", str(tmp_path))
    ttest.boundaries.cache_clear()
    yield tmp_path
    ttest.boundaries.cache_clear()


def null_draws(law: str, rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    if law == "normal":
        return rng.standard_normal(shape)
    if law.startswith("heavy"):
        return rng.standard_t(2, shape)
    # mostly small noise, sometimes a process a neighbour slowed by 30%: symmetric about 0 still
    return rng.normal(0, 0.02, shape) + rng.choice([-0.3, 0.3], shape) * (rng.random(shape) < 0.1)


def false_alarms(draws: np.ndarray, crit: tuple[float, ...]) -> float:
    """Share of null sequences in which some look's interval excludes 0 (|t| at or beyond its critical value)."""
    n = np.arange(1, draws.shape[1] + 1)
    mean = np.cumsum(draws, axis=1) / n
    with np.errstate(divide="ignore", invalid="ignore"):
        var = (np.cumsum(draws ** 2, axis=1) - n * mean ** 2) / (n - 1)
        t = np.abs(mean) / np.sqrt(np.maximum(var, 0) / n)
    hit = np.zeros(len(draws), dtype=bool)
    for look, c in enumerate(crit):
        if math.isfinite(c):
            hit |= t[:, look] >= c
    return float(hit.mean())


@pytest.mark.parametrize("law", ["normal", "heavy-tailed t(2)", "two-point outliers"])
def test_peeking_after_every_pair_keeps_the_t_test_honest(law: str) -> None:
    """P(any look's interval excludes the true shift) <= alpha with independent draws (another seed than the
    boundaries'), for normal pairs (exact but for Monte Carlo error) and the two heavy-tailed laws; looking at
    the fixed-sample level at every look instead does not keep it."""
    max_pairs, alpha, sims = 20, 0.05, 20_000
    draws = null_draws(law, np.random.default_rng(7), (sims, max_pairs))
    crit = ttest.boundaries(max_pairs, alpha)
    slack = 3 * math.sqrt(alpha * (1 - alpha) / sims)
    honest = false_alarms(draws, crit)
    assert honest <= alpha + slack, f"{law}: {honest:.4f} false alarms"
    naive = tuple(stats.t.ppf(1 - alpha / 2, n - 1) if n >= ttest.MIN_PAIRS else math.inf
                  for n in range(1, max_pairs + 1))
    if law == "normal":  # the heavy-tailed laws make the t-test conservative: naive peeking may stay under 2 alpha
        assert false_alarms(draws, naive) > 2 * alpha


def test_the_family_alpha_of_three_metrics_holds_too() -> None:
    """A small family alpha (0.05 over one cell x three metrics) at the default budget: still within alpha."""
    alpha, max_pairs, sims = 0.05 / 3, 30, 40_000
    draws = null_draws("normal", np.random.default_rng(8), (sims, max_pairs))
    rate = false_alarms(draws, ttest.boundaries(max_pairs, alpha))
    assert rate <= alpha + 3 * math.sqrt(alpha * (1 - alpha) / sims)


@pytest.mark.parametrize("spending", ttest.SPENDING)
def test_spending_is_monotone_and_ends_at_alpha(spending: str) -> None:
    fractions = np.linspace(0, 1, 41)
    spent = [ttest.spent(spending, f, 0.05) for f in fractions]
    assert spent[0] == 0 and spent[-1] == pytest.approx(0.05)
    assert all(b >= a for a, b in zip(spent, spent[1:]))
    if spending == "obf":  # early looks keep little: a third of the way, under 2% of alpha
        assert ttest.spent("obf", 1 / 3, 0.05) < 0.02 * 0.05


def test_obf_boundaries_fall_look_by_look_and_end_near_the_fixed_sample_t() -> None:
    crit = ttest.boundaries(30, 0.05)
    finite = [c for c in crit if math.isfinite(c)]
    assert crit[: ttest.MIN_PAIRS - 1] == (math.inf,) * (ttest.MIN_PAIRS - 1)  # the floor: no look before it decides
    assert all(b <= a for a, b in zip(finite, finite[1:])), finite
    fixed = stats.t.ppf(0.975, 29)
    assert fixed < finite[-1] < fixed + 0.3  # most of the alpha is kept for the last look


def test_boundaries_are_cached_on_disk(cache) -> None:
    first = ttest.boundaries(14, 0.1)
    assert (cache / "ab-levels.json").exists()
    ttest.boundaries.cache_clear()
    assert ttest.boundaries(14, 0.1) == first
    (cache / "ab-levels.json").write_text('{"' + next(iter(__import__("json").loads(
        (cache / "ab-levels.json").read_text()))) + '": [-1.0]}')  # planted nonsense is recomputed
    ttest.boundaries.cache_clear()
    assert ttest.boundaries(14, 0.1) == first


@pytest.mark.parametrize(("max_pairs", "alpha", "spending", "message"), [
    (14, 0.0, "obf", "alpha must be between 0 and 1"),
    (14, 1.0, "obf", "alpha must be between 0 and 1"),
    (14, -0.2, "obf", "alpha must be between 0 and 1"),
    (ttest.MIN_PAIRS - 1, 0.05, "obf", f"max_pairs must be {ttest.MIN_PAIRS}"),
    (1000, 0.05, "obf", "max_pairs must be"),
    (14, 0.05, "haybittle", "unknown spending function"),
])
def test_bad_input_is_a_clear_error(max_pairs: int, alpha: float, spending: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ttest.boundaries(max_pairs, alpha, spending)


def test_t_interval_by_hand() -> None:
    d = [0.01, 0.03, 0.02, 0.04, 0.00]  # mean 0.02, sd sqrt(0.00025)
    iv = ttest.t_interval(d, 2.0)
    half = 2.0 * math.sqrt(0.00025) / math.sqrt(5)
    assert iv.estimate == pytest.approx(0.02)
    assert (iv.low, iv.high) == (pytest.approx(0.02 - half), pytest.approx(0.02 + half))
    assert ttest.t_interval(d, math.inf).low == -math.inf and ttest.t_interval([0.1], 2.0).high == math.inf
    with pytest.raises(ValueError, match="finite log-ratios"):
        ttest.t_interval([0.1, math.nan], 2.0)
