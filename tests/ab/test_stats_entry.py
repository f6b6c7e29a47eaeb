"""The sequential test, ab's one entry to its statistics (``batchperf.ab.stats``): which interval each look gets,
how many pairs it needs, what it says of itself, and its round trip through ``ab.json``'s settings."""

from __future__ import annotations

import math

import pytest

from batchperf.ab.stats import SequentialTest, fewest_max_pairs, make_test, one_look, recorded_test, ttest

D = [0.01, 0.02, 0.03, 0.04, 0.05]  # five pairs' ln(B/A): mean and Hodges-Lehmann estimate 0.03
T_CRIT = (math.inf, math.inf, math.inf, math.inf, 2.0, 3.0)  # no look before pair 5, |t| 2 there, 3 at pair 6


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BATCHPERF_CACHE", str(tmp_path))  # levels and boundaries simulated here, not read from ~
    ttest.boundaries.cache_clear()


def test_signed_rank_looks_are_walsh_averages_at_the_level() -> None:
    # all five log-ratios positive: 2/2**5 = 0.0625 is the smallest two-sided p-value, so at level 0.1 a shift
    # below every Walsh average (all signs +) is rejected and one with a single Walsh average above it (T- = 1,
    # p = 2 * 2/32 = 0.125) is not: the interval runs from the smallest Walsh average (0.01) to the largest (0.05)
    iv = SequentialTest("signed-rank", level=0.1).interval(D)
    assert iv.n == 5 and iv.estimate == pytest.approx(0.03)
    assert (iv.low, iv.high) == (pytest.approx(0.01), pytest.approx(0.05))
    wide = SequentialTest("signed-rank", level=0.05).interval(D)  # below 0.0625: five pairs reject nothing
    assert (wide.low, wide.high) == (-math.inf, math.inf)


def test_t_looks_use_the_boundary_of_their_pair_and_the_last_one_beyond_it() -> None:
    # mean 0.03, sd sqrt(0.001 / 4) = 0.015811, so s / sqrt(5) = 0.0070711: ± 2 of those at pair 5
    test = SequentialTest("t", crit=T_CRIT)
    iv = test.interval(D)
    assert iv.estimate == pytest.approx(0.03)
    assert (iv.low, iv.high) == (pytest.approx(0.03 - 0.0141421, abs=1e-6), pytest.approx(0.03 + 0.0141421, abs=1e-6))
    seven = [*D, 0.03, 0.03]  # mean 0.03, sd 0.0129099 over 7: s / sqrt(7) = 0.0048795, beyond the boundaries: |t| 3
    later = test.interval(seven)
    assert later.high - later.low == pytest.approx(2 * 3.0 * 0.0048795, abs=1e-6)
    assert SequentialTest("t", crit=T_CRIT).interval(D[:4]).low == -math.inf  # pair 4: no look decides yet


def test_needs_is_the_first_look_that_can_decide() -> None:
    assert SequentialTest("signed-rank", level=0.1).needs == 5  # 2/2**5 = 0.0625 <= 0.1 < 2/2**4
    assert SequentialTest("signed-rank", level=0.0625).needs == 5
    assert SequentialTest("signed-rank", level=0.0).needs is None
    assert SequentialTest("t", crit=T_CRIT).needs == 5
    assert SequentialTest("t", crit=(math.inf,) * 6).needs is None


def test_describe_names_the_test_and_its_level_or_boundaries() -> None:
    assert SequentialTest("signed-rank", level=0.0123).describe() == (
        "Wilcoxon signed-rank on ln(B/A) per pair, Hodges-Lehmann estimate, per-look level 0.0123")
    assert SequentialTest("t", crit=T_CRIT).describe().endswith("(|t| 2 at pair 5 … 3 at pair 6)")
    assert SequentialTest("t", crit=(math.inf,) * 3).describe() == "sequential t-interval: no look can decide"


@pytest.mark.parametrize("test", [SequentialTest("signed-rank", level=0.0123),
                                  SequentialTest("t", crit=T_CRIT)], ids=["signed-rank", "t"])
def test_what_ab_json_records_gives_the_same_test_back(test: SequentialTest) -> None:
    recorded = test.to_dict()
    assert recorded_test(recorded) == test
    if test.test == "t":  # JSON has no infinity: a look that cannot decide is recorded as null
        assert recorded == {"test": "t", "per_look_level": None, "t_boundaries": [None, None, None, None, 2.0, 3.0]}
    else:
        assert recorded == {"test": "signed-rank", "per_look_level": 0.0123, "t_boundaries": None}


def test_an_ab_json_from_before_test_existed_is_signed_rank() -> None:
    assert recorded_test({"per_look_level": 0.01}) == SequentialTest("signed-rank", level=0.01)


def test_make_test_simulates_the_level_and_the_boundaries_once_per_run() -> None:
    signed = make_test("signed-rank", 14, 0.05)
    assert signed.test == "signed-rank" and 0 < signed.level < 0.05 and signed.method  # Pocock: below alpha
    t = make_test("t", 14, 0.05)
    assert t.crit == ttest.boundaries(14, 0.05, "obf") and t.needs >= ttest.MIN_PAIRS and "simulated" in t.method
    d = [-0.06, -0.05, -0.07, -0.04, -0.05, -0.06, -0.05, -0.06, -0.05, -0.04, -0.06, -0.05, -0.05, -0.06]
    assert t.interval(d).high < 0 and signed.interval(d).high < 0  # a steady 5% slowdown is excluded from 0 by both
    with pytest.raises(ValueError, match="unknown test 'bayes'; known: signed-rank, t"):
        make_test("bayes", 14, 0.05)


def test_fewest_max_pairs_is_the_smallest_budget_that_can_decide() -> None:
    assert fewest_max_pairs("t", 0.05) == ttest.MIN_PAIRS  # the t-test never looks before its floor
    # signed-rank: one look can reject at 2/2**6 <= 0.05, and a budget of 6 looks keeps a level that admits it;
    # over three metrics (0.05 / 3) the seventh look is the first (tests/ab/test_run.py sees 7 refused at 6)
    assert fewest_max_pairs("signed-rank", 0.05) == 6
    assert fewest_max_pairs("signed-rank", 0.05 / 3) == 7


def test_one_look_is_the_fixed_sample_interval_at_the_level() -> None:
    """A figure that makes no call is judged once, over all its pairs: the fixed-sample t (|t| 2.776 at 5 pairs and
    95%) or signed-rank at the level itself, never a run's sequential boundaries."""
    t = one_look("t", 5, 0.05)
    assert t.crit == (pytest.approx(2.7764, abs=1e-4),) and t.needs == 1
    interval = t.interval(D)
    half = 2.7764 * 0.0158114 / math.sqrt(5)  # the five pairs' sd is 0.0158
    assert (interval.low, interval.high) == pytest.approx((0.03 - half, 0.03 + half), abs=1e-4)
    assert one_look("t", 1, 0.05).crit == (math.inf,)  # one pair has no sd: no interval
    signed = one_look("signed-rank", 8, 0.05)
    assert signed.level == 0.05 and signed.needs == 6  # 2/2^6 = 0.031 is the first p under 0.05
    with pytest.raises(ValueError, match="unknown test 'bayes'"):
        one_look("bayes", 5, 0.05)
