"""The KV bytes a request held, on a cell whose batches depend on timing: reported, not compared exactly.

hf-static on a trace forms static batches from what has arrived, so the padding a request is held with moves with
the clock; a cell records how far it moved between its rounds (``kv.kv_bytes_round_spread``), and the gate then
shows the figure without asking it to equal the baseline's (a slower run would otherwise read as a KV regression).
"""

from __future__ import annotations

from gate_samples import cell_info, copied

from batchperf.regress.gate import compare_cell
from batchperf.regress.verdict import Verdict


def with_kv(record, per_request: float, spread: float | None):
    out = copied(record)
    out.kv["kv_bytes_per_request_mean"] = per_request
    if spread is not None:
        out.kv["kv_bytes_round_spread"] = spread
    return out


def kv_row(verdict):
    return next(m for m in verdict.metrics if m.name == "kv_bytes_per_request_mean")


def test_a_timing_dependent_kv_figure_is_reported_not_judged() -> None:
    base = with_kv(cell_info(), 1262933.0, 0.004)
    verdict = compare_cell("c", base, with_kv(cell_info(), 1274368.0, 0.0))  # this run's rounds agreed, not the baseline's
    row = kv_row(verdict)
    assert row.verdict is Verdict.NOT_JUDGED and not row.deciding
    assert row.note == "depends on timing in this cell (the baseline's rounds 0.40% apart): reported, not compared exactly"
    assert verdict.verdict is Verdict.NO_CHANGE  # judged by the rest of its metrics


def test_a_repeatable_kv_figure_is_still_compared_exactly() -> None:
    for spread in (0.0, None):  # rounds that agreed, or a record from before the spread was kept
        verdict = compare_cell("c", with_kv(cell_info(), 178176.0, spread), with_kv(cell_info(), 180224.0, spread))
        assert kv_row(verdict).verdict is Verdict.REGRESSION and verdict.verdict is Verdict.REGRESSION
