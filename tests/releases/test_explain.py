"""A confirmed call's engine figures are judged at one look at 95%, of the run's kind of interval, not at the
sequential boundary of the look where the run stopped (batchperf.releases.explain.LEVEL, ab.stats.one_look)."""

from __future__ import annotations

import math

import pytest

from batchperf.ab.cell import PairSeries
from batchperf.ab.judging import judge_metric
from batchperf.ab.stats import SequentialTest, make_test, one_look
from batchperf.measure.catalogue import Direction
from batchperf.releases.explain import LEVEL, Figure, _figure

# vLLM's decode time per request, ln(B/A) in five pairs: about -11%, as 0.27.1 -> 0.28.0 measured it
DECODE = [-0.05, -0.18, -0.10, -0.16, -0.08]


def judged(test: SequentialTest, logs: list[float] = DECODE) -> Figure:
    series = PairSeries("counters.request_decode_time_seconds", Direction.LOWER, False, 0.0)
    series.a = [1.0] * len(logs)
    series.b = [math.exp(x) for x in logs]
    judge_metric(series, test)
    return _figure(series)


def test_a_figure_of_a_t_run_that_stopped_at_pair_5_is_judged_at_one_look_at_95() -> None:
    """Seen: the engine chain's t runs stopped at pair 5 of 8, whose sequential boundary is |t| 9.04; judged at
    that, no engine figure differed in the confirmed 0.28.0 gain (chain.md: "no engine figure differs")."""
    assert judged(make_test("t", 8, 0.05 / 6)).sign == 0  # the run's own boundary at its stopping look
    test = one_look("t", 5, LEVEL)
    assert test.crit == (pytest.approx(2.776, abs=1e-3),)  # the fixed-sample t, 4 degrees of freedom, 95%
    figure = judged(test)
    assert figure.sign == -1 and figure.high < 0 and figure.estimate == pytest.approx(math.expm1(-0.114), abs=1e-3)


def test_a_signed_rank_run_is_judged_by_signed_rank_at_95() -> None:
    """Five pairs cannot exclude 0 by signed-rank at 95% (two-sided p >= 2/2^5); eight pairs all below 0 can."""
    assert one_look("signed-rank", 5, LEVEL).level == 0.05
    assert judged(one_look("signed-rank", 5, LEVEL)).sign == 0
    eight = DECODE + [-0.12, -0.09, -0.14]
    assert judged(one_look("signed-rank", 8, LEVEL), eight).sign == -1


def test_a_figure_with_no_difference_is_not_shown_to_differ() -> None:
    logs = [0.02, -0.03, 0.01, -0.02, 0.03, -0.01]
    assert judged(one_look("t", 6, LEVEL), logs).sign == 0 and judged(one_look("signed-rank", 6, LEVEL), logs).sign == 0
