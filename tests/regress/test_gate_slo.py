"""The gate on SLO attainment: judged in percentage points (an absolute rule), overall and per tenant."""

from __future__ import annotations

import pytest
from gate_samples import cell_info, copied

from batchperf.measure.catalogue import by_name
from batchperf.regress.gate import compare_cell, judge_against_baseline
from batchperf.regress.verdict import Verdict, render_text
from batchperf.results.record import CellRecord

ATTAINMENT = by_name("slo.attainment")
TENANT_ATTAINMENT = by_name("tenants.attainment")


def with_slo(record: CellRecord, overall: float, **tenants: float) -> CellRecord:
    out = copied(record)
    out.slo = {"attainment": overall, "request_goodput": 10.0, "offered": 16, "met": round(16 * overall)}
    out.tenants = {name: {"attainment": value, "offered": 8} for name, value in tenants.items()}
    return out


def test_attainment_is_judged_in_points_not_relative_to_the_baseline() -> None:
    base = with_slo(cell_info(), 0.40)
    floor = ATTAINMENT.floor("cpu")  # 0.15: 15 points
    # 0.40 -> 0.30 is -25% relative but -10 points: within the floor
    within = judge_against_baseline(ATTAINMENT, base, with_slo(cell_info(), 0.30), "cpu", k=3.0)
    assert within.change == pytest.approx(-0.10) and within.tolerance == pytest.approx(floor)
    assert within.verdict is Verdict.NO_CHANGE
    beyond = judge_against_baseline(ATTAINMENT, base, with_slo(cell_info(), 0.40 - floor - 0.01), "cpu", k=3.0)
    assert beyond.verdict is Verdict.REGRESSION
    better = judge_against_baseline(ATTAINMENT, base, with_slo(cell_info(), 0.60), "cpu", k=3.0)
    assert better.verdict is Verdict.IMPROVEMENT


def test_a_zero_attainment_baseline_is_judged() -> None:
    """A relative rule cannot judge a zero baseline; points can: from 0 to 30% met is an improvement."""
    got = judge_against_baseline(ATTAINMENT, with_slo(cell_info(), 0.0), with_slo(cell_info(), 0.30), "cpu", k=3.0)
    assert got.verdict is Verdict.IMPROVEMENT and got.change == pytest.approx(0.30)


def test_each_tenant_is_gated_and_named() -> None:
    base = with_slo(cell_info(), 0.9, chat=0.95, batch=0.85)
    now = with_slo(cell_info(), 0.9, chat=0.60, batch=0.85)
    verdict = compare_cell("c", base, now)
    by_metric = {m.metric: m for m in verdict.metrics}
    assert by_metric["tenants.attainment[chat]"].verdict is Verdict.REGRESSION
    assert by_metric["tenants.attainment[batch]"].verdict is Verdict.NO_CHANGE
    assert verdict.verdict is Verdict.REGRESSION
    table = render_text(verdict)
    assert "attainment[chat]" in table and "-35.0 pp" in table and "-20.0 pp" in table  # change, CPU floor


def test_a_tenant_missing_from_the_run_fails() -> None:
    base = with_slo(cell_info(), 0.9, chat=0.95, batch=0.85)
    now = with_slo(cell_info(), 0.9, chat=0.95)
    by_metric = {m.metric: m for m in compare_cell("c", base, now).metrics}
    assert by_metric["tenants.attainment[batch]"].verdict is Verdict.FAILED


def test_a_baseline_without_slo_sections_is_not_judged_on_them() -> None:
    verdict = compare_cell("c", cell_info(), with_slo(cell_info(), 0.1, chat=0.0))
    assert not [m for m in verdict.metrics if "attainment" in m.metric]


def test_a_workload_without_tenants_is_judged_once_not_again_per_tenant() -> None:
    base = with_slo(cell_info(), 0.9, **{"": 0.9})
    verdict = compare_cell("c", base, with_slo(cell_info(), 0.5, **{"": 0.5}))
    attainment = [m.metric for m in verdict.metrics if "attainment" in m.metric]
    assert attainment == ["slo.attainment"] and verdict.verdict is Verdict.REGRESSION


def test_the_rich_table_names_each_tenant(capsys) -> None:
    """rich reads "[chat]" as markup: unescaped, every tenant's row read "attainment" and its note lost the name."""
    from rich.console import Console

    from batchperf.regress.verdict import render_rich

    verdict = compare_cell("c", with_slo(cell_info(), 0.9, chat=0.95, batch=0.85),
                           with_slo(cell_info(), 0.9, chat=0.5))
    console = Console(record=True, width=160)
    render_rich([verdict], console)
    text = console.export_text()
    assert "attainment[chat]" in text and "attainment[batch]" in text
