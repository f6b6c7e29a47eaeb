"""One cell of a ``batchperf ab`` run (``batchperf.ab.cell``): a metric's series over the pairs, its verdict row and
what ``ab.json`` keeps of it, and the cell's verdict with every reason, against hand-computed values."""

from __future__ import annotations

import math

import pytest

from batchperf.ab.cell import CellState, PairSeries
from batchperf.ab.stats.signed_rank import Interval
from batchperf.measure.catalogue import Direction
from batchperf.regress.verdict import Verdict


def test_a_series_ratios_are_b_over_a_and_a_zero_has_no_logarithm() -> None:
    s = PairSeries("output_throughput", Direction.HIGHER, True, 0.03, a=[100.0, 0.0, 50.0], b=[110.0, 5.0, 50.0])
    assert s.log_ratios == [pytest.approx(math.log(1.1)), 0.0]
    saved = s.to_dict()
    assert saved["ratios"] == [pytest.approx(1.1), None, 1.0] and saved["n"] == 3 and saved["call"] == "inconclusive"
    assert "note" not in saved and "estimate" not in saved  # nothing to say yet, no interval yet


def test_a_series_verdict_has_a_s_and_b_s_medians_and_the_interval_as_relative_changes() -> None:
    s = PairSeries("output_throughput", Direction.HIGHER, True, 0.03, a=[100.0, 102.0, 98.0], b=[90.0, 91.0, 89.0],
                   interval=Interval(3, math.log(0.9), math.log(0.88), math.log(0.92)), call=Verdict.REGRESSION,
                   note="open", reported_why="why", caveat="caveat")
    v = s.verdict()
    assert (v.reference, v.measured) == (100.0, 90.0) and v.change == pytest.approx(-0.1)
    assert v.interval == (pytest.approx(-0.12), pytest.approx(-0.08)) and v.tolerance == 0.03 and v.pairs == 3
    assert v.verdict is Verdict.REGRESSION and v.note == "open; why; caveat"
    saved = s.to_dict()
    assert (saved["estimate"], saved["low"], saved["high"]) == (pytest.approx(-0.1), pytest.approx(-0.12),
                                                                 pytest.approx(-0.08))
    assert saved["note"] == "open; why; caveat"
    exact = PairSeries("kv_bytes_per_request_mean", Direction.EXACT, True, 0.0, a=[1.0], b=[1.0]).verdict()
    assert math.isnan(exact.tolerance) and math.isnan(exact.change)  # an exact metric has no margin, no estimate


def test_a_cell_verdict_lists_deciding_then_exact_then_reported_metrics_with_every_reason() -> None:
    cell = CellState("c1", "perf_tests/test_cells.py::test_cell[c1]", note="pair 2: fails in environment B only",
                     failures={"B": "failed: boom", "A": "no results (the cell did not run)"},
                     client_bound=[f"pair {i}, A's client lagged" for i in range(1, 5)])
    for name, direction, deciding in [("p99_ttft_ms", Direction.LOWER, False), ("kv", Direction.EXACT, True),
                                      ("output_throughput", Direction.HIGHER, True)]:
        cell.metrics[name] = PairSeries(name, direction, deciding, 0.03)
    got = cell.cell_verdict()
    assert [m.metric for m in got.metrics] == ["output_throughput", "kv", "p99_ttft_ms"]
    assert got.notes[:3] == ("pair 2: fails in environment B only", "in A: no results (the cell did not run)",
                             "in B: failed: boom")
    assert got.notes[3].startswith("4 pair(s) client-bound") and got.notes[3].endswith("pair 3, A's client lagged; …")
    saved = cell.to_dict()
    assert saved["id"] == "c1" and saved["verdict"] == "inconclusive" and saved["settled_at"] is None
    assert [m["metric"] for m in saved["metrics"]] == ["p99_ttft_ms", "kv", "output_throughput"]  # as measured
