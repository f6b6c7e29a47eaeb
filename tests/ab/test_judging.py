"""Judging an A/B cell (``batchperf.ab.judging``): which series a pair adds and which of them decide, one metric's
interval and call against hand-computed values, and a cell's verdict, frozen once clear. (Exact metrics:
test_exact.py; client-bound pairs: test_client_bound.py; tenants: test_tenants.py; zero counts: test_zero_counts.py.)"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest
from paths import DATA

from batchperf.ab.cell import CellState, PairSeries
from batchperf.ab.env import Environment
from batchperf.ab.judging import add_pair, cell_verdict, judge_cell, judge_metric, series_of, tenant_series
from batchperf.ab.settings import Settings
from batchperf.ab.stats import SequentialTest
from batchperf.measure.catalogue import AB_WITH_LATENCY, GATED, TENANT_METRICS, Direction
from batchperf.regress.verdict import Verdict
from batchperf.results.io import read_results

RECORD = read_results(DATA / "results_cpu_small.json").records[0]
TEST = SequentialTest("signed-rank", level=0.05)  # six pairs of one sign reach 2/2**6 = 0.031 <= 0.05


def settings(**kwargs: object) -> Settings:
    return Settings(Environment("A", Path("/py/a")), Environment("B", Path("/py/b")), (), Path("/tmp/ab"),
                    **kwargs)  # type: ignore[arg-type]


def test_a_tenant_s_series_is_named_after_its_metric() -> None:
    rule = next(m for m in TENANT_METRICS if m.name == "p99_ttft_ms")
    assert tenant_series(rule, "chat.v2") == "p99_ttft_ms[chat.v2]"


def test_every_gated_metric_is_a_series_and_throughput_and_the_exact_ones_decide() -> None:
    found = [(name, deciding) for _, name, _, deciding in series_of(settings(), RECORD, RECORD)]
    assert [name for name, _ in found] == [m.name for m in GATED]  # a cell without tenants: no per-tenant series
    assert {n for n, deciding in found if deciding} == (
        {"output_throughput"} | {m.name for m in GATED if m.direction is Direction.EXACT})
    latency = dict((name, deciding) for _, name, _, deciding in series_of(settings(metrics=AB_WITH_LATENCY), RECORD,
                                                                           RECORD))
    other = next(m.name for m in GATED if m.direction is not Direction.EXACT and m.name not in AB_WITH_LATENCY)
    assert latency["p99_ttft_ms"] and latency["p99_e2el_ms"] and not latency[other]


def test_a_pair_adds_each_side_s_value_with_its_margin() -> None:
    cell = CellState("c", "n")
    slower = replace(RECORD, metrics={**RECORD.metrics, "output_throughput": 90.0})
    add_pair(cell, settings(margins={"output_throughput": 0.05}), RECORD, slower, 1)
    tput = cell.metrics["output_throughput"]
    assert (tput.a, tput.b) == ([RECORD.metrics["output_throughput"]], [90.0])
    assert tput.deciding and tput.margin == 0.05 and tput.direction is Direction.HIGHER
    assert cell.metrics["p99_ttft_ms"].margin == 0.03 and not cell.metrics["p99_ttft_ms"].deciding
    assert all(s.margin == 0.0 for s in cell.metrics.values() if s.direction is Direction.EXACT)
    assert not cell.client_bound  # neither side's client lagged


def test_a_deciding_metric_the_cell_does_not_record_stays_open_saying_why() -> None:
    absent = next(m for m in GATED if m.direction is not Direction.EXACT and RECORD.value(m.keys) is None)
    cell = CellState("c", "n")
    add_pair(cell, settings(metrics=("output_throughput", absent.name)), RECORD, RECORD, 1)
    series = cell.metrics[absent.name]
    assert series.deciding and not series.a and series.caveat.startswith(f"neither side records {absent.name}")
    judge_cell(cell, TEST, 1)
    assert cell.verdict is Verdict.INCONCLUSIVE  # never decided without it


def test_a_metric_s_interval_and_call_by_hand() -> None:
    # six log-ratios of one sign: at level 0.05 the interval runs from the smallest Walsh average (the smallest
    # ratio, ln 0.89) to the largest (ln 0.91); beyond the 3% margin on the bad side: a regression
    series = PairSeries("output_throughput", Direction.HIGHER, True, 0.03, a=[100.0] * 6,
                        b=[90.0, 91.0, 89.0, 90.5, 89.5, 90.0])
    judge_metric(series, TEST)
    iv = series.interval
    assert iv is not None and (iv.low, iv.high) == (pytest.approx(math.log(0.89)), pytest.approx(math.log(0.91)))
    assert iv.estimate == pytest.approx(math.log(0.9), abs=0.002) and series.call is Verdict.REGRESSION
    faster = PairSeries("p99_ttft_ms", Direction.LOWER, True, 0.03, a=[100.0] * 6, b=series.b)  # lower is better
    judge_metric(faster, TEST)
    assert faster.call is Verdict.IMPROVEMENT
    within = PairSeries("output_throughput", Direction.HIGHER, True, 0.15, a=[100.0] * 6, b=series.b)
    judge_metric(within, TEST)
    assert within.call is Verdict.NO_CHANGE  # -11%..-9% lies inside a 15% margin


def test_too_few_pairs_leave_the_metric_inconclusive() -> None:
    series = PairSeries("output_throughput", Direction.HIGHER, True, 0.03, a=[100.0] * 5, b=[90.0] * 5)
    judge_metric(series, TEST)  # 2/2**5 = 0.0625 > 0.05: five pairs cannot exclude anything
    assert series.interval is not None and series.interval.low == -math.inf and series.call is Verdict.INCONCLUSIVE


def test_a_cell_is_inconclusive_until_every_deciding_metric_is_decided() -> None:
    def decided(call: Verdict, deciding: bool = True) -> PairSeries:
        return PairSeries("m", Direction.HIGHER, deciding, 0.03, call=call)

    assert cell_verdict([decided(Verdict.NO_CHANGE), decided(Verdict.INCONCLUSIVE)]) is Verdict.INCONCLUSIVE
    assert cell_verdict([decided(Verdict.NO_CHANGE), decided(Verdict.REGRESSION, deciding=False)]) is Verdict.NO_CHANGE
    assert cell_verdict([decided(Verdict.IMPROVEMENT), decided(Verdict.REGRESSION)]) is Verdict.REGRESSION
    assert cell_verdict([decided(Verdict.NO_CHANGE, deciding=False)]) is Verdict.INCONCLUSIVE  # nothing decides


def test_a_clear_cell_is_frozen_at_its_pairs() -> None:
    cell = CellState("c", "n")
    cell.metrics["output_throughput"] = PairSeries("output_throughput", Direction.HIGHER, True, 0.03,
                                                   a=[100.0] * 6, b=[90.0, 91.0, 89.0, 90.5, 89.5, 90.0])
    judge_cell(cell, TEST, 6)
    assert cell.verdict is Verdict.REGRESSION and cell.settled_at == 6
    cell.metrics["output_throughput"].b[:] = [100.0] * 6
    judge_cell(cell, TEST, 7)  # a settled cell keeps its verdict (it is left out of later pairs anyway)
    assert cell.verdict is Verdict.REGRESSION and cell.settled_at == 6
