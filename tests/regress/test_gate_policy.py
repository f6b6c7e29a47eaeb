"""Policies are gated like backends (issue 27): the cell id carries the policy, so a change to a policy that lowers
attainment or capacity beyond the floor is a regression; a cell whose policy starved a tenant is never a pass."""

from __future__ import annotations

from gate_samples import cell_info, copied

from batchperf.measure.catalogue import by_name
from batchperf.regress.gate import compare_cell, confirm
from batchperf.regress.verdict import Verdict
from batchperf.results.record import CellRecord

AIMD_CELL = "cpu-tiny-qwen2-continuous-bs4-p64-c4-wtenants-two_tenants-8a6ba413-polaimd"


def policy_cell(overall: float, chat: float, batch: float, starved: str | None = None) -> CellRecord:
    out = copied(cell_info(AIMD_CELL))
    out.cell.update(backend="continuous", policy="aimd")
    out.slo = {"attainment": overall, "request_goodput": 5.0, "offered": 16, "met": round(16 * overall),
               "starved_tenants": int(starved is not None)}
    out.tenants = {name: {"attainment": value, "offered": 8, "starved": int(name == starved),
                          "longest_unserved_s": 7.5 if name == starved else 0.2}
                   for name, value in (("chat", chat), ("batch", batch))}
    out.policy = {"name": "aimd", "text": "aimd", "label": "aimd", "params": {}, "engine": "batchperf"}
    return out


def test_a_changed_policy_that_lowers_attainment_beyond_the_floor_fails_the_gate() -> None:
    """The aimd cell's baseline met 95% of the interactive tenant; a change to aimd that meets 60% is a regression
    (overall and for that tenant), named by tenant."""
    base = policy_cell(0.95, chat=0.95, batch=0.95)
    now = policy_cell(0.70, chat=0.60, batch=0.85)
    verdict = compare_cell(AIMD_CELL, base, now)
    by_metric = {m.metric: m.verdict for m in verdict.metrics}
    assert verdict.verdict is Verdict.REGRESSION
    assert by_metric["slo.attainment"] is Verdict.REGRESSION
    assert by_metric["tenants.attainment[chat]"] is Verdict.REGRESSION
    assert by_metric["tenants.attainment[batch]"] is Verdict.NO_CHANGE


def test_within_the_floor_the_policy_passes() -> None:
    floor = by_name("slo.attainment").floor("cpu")
    base = policy_cell(0.95, chat=0.95, batch=0.95)
    now = policy_cell(0.95 - floor / 2, chat=0.95 - floor / 2, batch=0.95)
    assert compare_cell(AIMD_CELL, base, now).verdict is Verdict.NO_CHANGE


def test_a_lower_capacity_under_a_policy_is_a_regression() -> None:
    base, now = policy_cell(0.95, 0.95, 0.95), policy_cell(0.95, 0.95, 0.95)
    base.capacity = {"max_load": 2.0, "max_request_rate": 8.0}
    now.capacity = {"max_load": 1.0, "max_request_rate": 4.0}
    verdict = compare_cell(AIMD_CELL, base, now)
    assert {m.metric: m.verdict for m in verdict.metrics}["capacity.max_load"] is Verdict.REGRESSION
    assert verdict.failed


def test_a_starved_tenant_is_never_a_pass_with_a_baseline_or_without() -> None:
    base = policy_cell(0.95, chat=0.95, batch=0.95)
    hungry = policy_cell(0.95, chat=0.95, batch=0.95, starved="batch")  # attainment alone would read as a pass
    verdict = compare_cell(AIMD_CELL, base, hungry)
    assert verdict.verdict is Verdict.FAILED and verdict.failed
    assert any("starved tenant(s): batch (7.50 s unserved)" in n for n in verdict.notes)
    alone = compare_cell(AIMD_CELL, None, hungry)
    assert alone.verdict is Verdict.FAILED and any("no baseline" in n for n in alone.notes)
    # the gate's re-measurement cannot forgive it when that run starved the tenant too
    assert confirm(verdict, compare_cell(AIMD_CELL, base, hungry)).verdict is Verdict.FAILED
    assert compare_cell(AIMD_CELL, base, policy_cell(0.95, 0.95, 0.95)).verdict is Verdict.NO_CHANGE
