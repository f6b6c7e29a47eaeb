"""Judging an A/B cell on its pairs so far: each pair's values of every gated metric (less those a client-bound side
set), each metric's interval and call (an exact metric: value for value, :func:`exact_call`), and the cell's verdict,
frozen once it is clear. The rules of what can be judged are the gate's too (:mod:`batchperf.regress.judgeable`)."""

from __future__ import annotations

from collections.abc import Sequence

from batchperf.ab import judge as ab_judge
from batchperf.ab import stats as ab_stats
from batchperf.ab.result import CellState, PairSeries
from batchperf.ab.settings import Settings
from batchperf.measure.catalogue import GATED, Direction, Metric
from batchperf.regress.judgeable import (
    EXACT_REL,
    arrival_reason,
    client_bound_note,
    client_bound_reason,
    open_loop_caveat,
)
from batchperf.regress.verdict import Verdict, combine
from batchperf.results.record import CellRecord


def rules_for(settings: Settings) -> list[tuple[Metric, bool]]:
    """(metric, deciding) for every gated metric: exact ones and ``--metrics`` decide, the rest are reported."""
    return [(r, r.direction is Direction.EXACT or r.name in settings.metrics) for r in GATED]


def add_pair(cell: CellState, settings: Settings, a: CellRecord, b: CellRecord, index: int) -> None:
    """Append pair ``index``'s values of every metric both sides produced, except those a side's client set (a
    server cell whose client lagged: its latencies, and its throughput unless the server was kept full; the
    gate's rule too, :func:`batchperf.regress.judgeable.client_bound_reason`), which that pair leaves out, saying
    why."""
    left_out: list[str] = []
    for rule, deciding in rules_for(settings):
        x, y = a.value(rule.path), b.value(rule.path)
        if x is None or y is None:
            continue
        result = cell.metrics.get(rule.name)
        if result is None:  # made even when left out below: a deciding metric no pair gave stays undecided
            why = next(filter(None, (arrival_reason(rule.path, record) for record in (a, b))), "")
            result = cell.metrics[rule.name] = PairSeries(rule.name, rule.direction, deciding and not why,
                                                            0.0 if rule.direction is Direction.EXACT
                                                            else settings.margin_of(rule.name), reported_why=why,
                                                            caveat=open_loop_caveat(rule.path, a) or "")
        if any(client_bound_reason(rule.path, record, label) for record, label in ((a, "A"), (b, "B"))):
            left_out.append(rule.name)
            continue
        result.a.append(x)
        result.b.append(y)
    if left_out:
        why = "; ".join(n for record, label in ((a, "A"), (b, "B")) if (n := client_bound_note(record, label)))
        cell.client_bound.append(f"pair {index}, {why} (left out of {', '.join(left_out)})")


def judge_metric(result: PairSeries, judge: ab_judge.Judge) -> None:
    if result.direction is Direction.EXACT:
        result.call, result.note = exact_call(result.a, result.b)
        if result.call is Verdict.NOT_JUDGED:
            result.deciding = False  # it cannot decide this cell; reported, with why
        return
    if result.a and all(x == 0 and y == 0 for x, y in zip(result.a, result.b)):  # e.g. no preemption anywhere
        result.call, result.note = Verdict.NO_CHANGE, "0 on both sides in every pair"
        return
    result.note = ""
    if one_sided := sum((x > 0) != (y > 0) for x, y in zip(result.a, result.b)):
        # a ratio with a 0 (preemptions that appear, or vanish) has no logarithm: say so rather than drop the pair
        result.note = (f"0 on one side only in {one_sided} of {len(result.a)} pair(s): no ratio there, so it is "
                       "judged on the pairs where both are positive; read the medians")
    ratios = result.log_ratios
    if not ratios:
        return
    result.interval = judge.interval(ratios)
    result.call = ab_stats.call(result.interval, result.direction is Direction.HIGHER, result.margin)


def exact_call(a: Sequence[float], b: Sequence[float]) -> tuple[Verdict, str]:
    """An exact metric (KV bytes) over the pairs so far, and a note: equal in every pair, no change; a difference
    that each side repeats in every one of its own processes, regression once two pairs show it (one pair:
    inconclusive, a second one confirms); a side whose own processes differ, not judged: the figure depends on
    timing there, so it cannot be asked to be equal. (Where the cell says so in advance, a padded batch under
    open-loop arrivals, the figure never decides at all: :func:`batchperf.regress.judgeable.arrival_reason`.)"""
    def same(x: float, y: float) -> bool:
        return abs(y - x) <= EXACT_REL * max(abs(x), 1.0)

    if all(same(x, y) for x, y in zip(a, b)):
        return Verdict.NO_CHANGE, ""
    if wanders := [label for label, side in (("A", a), ("B", b)) if not all(same(side[0], v) for v in side)]:
        return Verdict.NOT_JUDGED, (f"differs between {' and '.join(wanders)}'s own processes: it depends on "
                                    "timing in this cell, so it is reported, not compared exactly")
    if len(a) < 2:
        return Verdict.INCONCLUSIVE, "differs in the first pair: a second pair confirms it"
    return Verdict.REGRESSION, ""


def cell_verdict(metrics: Sequence[PairSeries]) -> Verdict:
    """A cell's verdict from its deciding metrics' calls: inconclusive until every one is decided."""
    return combine((m.call for m in metrics if m.deciding), empty=Verdict.INCONCLUSIVE)


def judge_cell(cell: CellState, judge: ab_judge.Judge, pairs: int) -> None:
    """Re-judge an unsettled cell on its pairs so far; freeze it once its verdict is clear."""
    if cell.settled:
        return
    for result in cell.metrics.values():
        judge_metric(result, judge)
    cell.verdict = cell_verdict(list(cell.metrics.values()))
    if cell.verdict is not Verdict.INCONCLUSIVE:
        cell.settled_at = pairs
