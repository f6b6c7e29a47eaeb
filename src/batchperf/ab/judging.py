"""Judging an A/B cell on its pairs so far: each pair's values of every gated metric (less those a client-bound side
set), each metric's interval and call (an exact metric: value for value, :func:`exact_call`), and the cell's verdict,
frozen once it is clear. The rules of what can be judged are the gate's too (:mod:`batchperf.regress.judgeable`)."""

from __future__ import annotations

from collections.abc import Sequence

from batchperf.ab.cell import CellState, PairSeries, round_paired
from batchperf.ab.settings import Settings, per_tenant_name
from batchperf.ab.stats import SequentialTest, signed_rank
from batchperf.measure.catalogue import AB_PER_TENANT, GATED, TENANT_METRICS, Direction, Metric
from batchperf.measure.slo import NO_TENANT
from batchperf.regress.judgeable import (
    EXACT_REL,
    arrival_reason,
    client_bound_note,
    client_bound_reason,
    open_loop_caveat,
)
from batchperf.regress.verdict import Verdict, combine
from batchperf.results.record import CellRecord

PER_TENANT_RULES: tuple[Metric, ...] = tuple(m for m in TENANT_METRICS if m.name in AB_PER_TENANT)


def tenant_series(rule: Metric, tenant: str) -> str:
    """The name of one tenant's series of a per-tenant metric: ``p99_ttft_ms[interactive]``."""
    return f"{rule.name}[{tenant}]"


def series_of(settings: Settings, a: CellRecord, b: CellRecord) -> list[tuple[Metric, str, tuple[str, ...], bool]]:
    """(metric, series name, keys in a record, deciding) for every gated metric, and in a cell with tenants for each
    per-tenant one (:data:`AB_PER_TENANT`) of every tenant both sides have: exact ones and ``--metrics`` decide,
    the rest are reported."""
    found = [(r, r.name, r.keys, r.direction is Direction.EXACT or r.name in settings.metrics) for r in GATED]
    for tenant in sorted((set(a.tenants) & set(b.tenants)) - {NO_TENANT}):
        for rule in PER_TENANT_RULES:
            name = tenant_series(rule, tenant)
            found.append((rule, name, rule.tenant_keys(tenant), name in settings.metrics))
    return found


def add_pair(cell: CellState, settings: Settings, a: CellRecord, b: CellRecord, index: int) -> None:
    """Append pair ``index``'s values of every metric both sides produced, except those a side's client set (a
    server cell whose client lagged: its latencies, and its throughput unless the server was kept full; the
    gate's rule too, :func:`batchperf.regress.judgeable.client_bound_reason`), which that pair leaves out, saying
    why."""
    left_out: list[str] = []
    for rule, name, keys, deciding in series_of(settings, a, b):
        x, y = a.value(keys), b.value(keys)
        if x is None or y is None:
            continue
        result = cell.metrics.get(name)
        if result is None:  # made even when left out below: a deciding metric no pair gave stays undecided
            why = next(filter(None, (arrival_reason(rule.path, record) for record in (a, b))), "")
            result = cell.metrics[name] = PairSeries(name, rule.direction, deciding and not why,
                                                     0.0 if rule.direction is Direction.EXACT
                                                     else settings.margin_of(name), reported_why=why,
                                                     caveat=open_loop_caveat(rule.path, a) or "")
        if any(client_bound_reason(rule.path, record, label) for record, label in ((a, "A"), (b, "B"))):
            left_out.append(name)
            continue
        result.a.append(x)
        result.b.append(y)
        result.paired.append(round_paired(a.round_values(keys), b.round_values(keys)))
    missing_deciders(cell, settings, a, b)
    if left_out:
        why = "; ".join(n for record, label in ((a, "A"), (b, "B")) if (n := client_bound_note(record, label)))
        cell.client_bound.append(f"pair {index}, {why} (left out of {', '.join(left_out)})")


def missing_deciders(cell: CellState, settings: Settings, a: CellRecord, b: CellRecord) -> None:
    """A metric ``--metrics`` names that this cell does not record (a plain one neither side has, e.g. a prefix hit
    rate in a cell without shared prefixes; a per-tenant one of a tenant a cell with tenants lacks) stays a deciding
    series with no pairs, saying so: the cell is never decided without it (a misspelt tenant must not pass). In a
    cell without tenants, per-tenant names do not apply and are left out."""
    tenants = sorted((set(a.tenants) & set(b.tenants)) - {NO_TENANT})
    rules = {r.name: r for r in (*GATED, *PER_TENANT_RULES)}
    for name in settings.metrics:
        if name in cell.metrics:
            continue
        base, _, tenant = name[:-1].partition("[") if per_tenant_name(name) else (name, "", "")
        if tenant and tenants and tenant not in tenants:
            why = f"no tenant {tenant!r} in this cell (its tenants: {', '.join(tenants)})"
        elif not tenant and base in rules:
            sides = [label for label, r in (("A", a), ("B", b)) if r.value(rules[base].keys) is None]
            who = "neither side records" if len(sides) == 2 else f"{sides[0]} does not record"
            why = (f"{who} {name} in this cell: it cannot decide here (give --metrics without it, or run only the "
                   "cells that record it)")
        else:
            continue
        cell.metrics[name] = PairSeries(name, rules[base].direction, True, settings.margin_of(name), caveat=why)


def judge_metric(result: PairSeries, test: SequentialTest) -> None:
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
    result.interval = test.interval(ratios)
    result.call = signed_rank.call(result.interval, result.direction is Direction.HIGHER, result.margin)


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


def judge_cell(cell: CellState, test: SequentialTest, pairs: int) -> None:
    """Re-judge an unsettled cell on its pairs so far; freeze it once its verdict is clear."""
    if cell.settled:
        return
    for result in cell.metrics.values():
        judge_metric(result, test)
    cell.verdict = cell_verdict(list(cell.metrics.values()))
    if cell.verdict is not Verdict.INCONCLUSIVE:
        cell.settled_at = pairs
