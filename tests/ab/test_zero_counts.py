"""A count that is 0 (vLLM's preemptions on a cell that never runs short of KV): 0 against 0 in every pair is no
change, not an open question; a 0 on one side only has no log-ratio, and the metric says so instead of dropping
the pair in silence."""

from __future__ import annotations

from batchperf.ab.cell import PairSeries
from batchperf.ab.judging import judge_metric
from batchperf.ab.stats import SequentialTest
from batchperf.measure.catalogue import Direction
from batchperf.regress.verdict import Verdict

TEST = SequentialTest("signed-rank", level=0.03125)


def series(a: list[float], b: list[float]) -> PairSeries:
    return PairSeries("num_preemptions", Direction.LOWER, False, 0.03, a=a, b=b)


def test_zero_on_both_sides_in_every_pair_is_no_change() -> None:
    result = series([0.0] * 6, [0.0] * 6)
    judge_metric(result, TEST)
    assert result.call is Verdict.NO_CHANGE and result.note == "0 on both sides in every pair"
    assert result.verdict().note == "0 on both sides in every pair"


def test_a_zero_on_one_side_is_named_not_dropped_in_silence() -> None:
    result = series([0.0, 0.0, 3.0, 2.0, 2.0, 3.0], [4.0, 5.0, 3.0, 2.0, 2.0, 3.0])
    judge_metric(result, TEST)
    assert result.note.startswith("0 on one side only in 2 of 6 pair(s)")
    assert result.call is Verdict.INCONCLUSIVE  # the four pairs with a ratio cannot decide at this level


def test_the_note_clears_once_no_pair_has_a_zero() -> None:
    result = series([0.0, 2.0], [1.0, 2.0])
    judge_metric(result, TEST)
    assert "1 of 2" in result.note
    result.a[0] = 1.0
    judge_metric(result, TEST)
    assert result.note == ""
