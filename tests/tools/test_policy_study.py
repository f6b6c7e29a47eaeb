"""tools/policy_study.py: the static envelope is the best static cap at each load, and each target is judged
from the numbers (MET only when they say so)."""

from __future__ import annotations

import pytest
from tool_module import tool_module


@pytest.fixture(scope="module")
def tool():
    with tool_module("policy_study") as module:
        yield module


def row(policy: str, cap: int, load: float, att: float, tenants: dict | None = None, jain: float | None = None):
    return {"policy": policy, "cap": cap, "load": load, "attainment": att, "tenants": tenants or {},
            "jain": jain, "starved": None, "state": {}, "id": f"{policy}-{cap}-{load}"}


def test_the_envelope_is_the_best_static_cap_at_each_load_and_aimd_is_judged_against_it(tool) -> None:
    data = [row("fcfs", c, x, a) for x, by_cap in ((1.0, {1: 0.5, 4: 1.0, 16: 0.9}), (2.0, {1: 0.1, 4: 0.6, 16: 0.8}))
            for c, a in by_cap.items()]
    _, envelope, series = tool.table("poisson", data + [row("aimd", 16, 1.0, 0.98), row("aimd", 16, 2.0, 0.78)])
    assert envelope == {1.0: 1.0, 2.0: 0.8}
    assert series["fcfs"][2.0]["attainment"] == 0.8 == series["static 16"][2.0]["attainment"]  # fcfs at 16 is both
    (line,) = tool.judge("poisson", envelope, series)
    assert line.startswith("aimd within 3 points of the envelope at every load: MET")
    _, envelope, series = tool.table("poisson", data + [row("aimd", 16, 1.0, 0.96), row("aimd", 16, 2.0, 0.8)])
    assert "NOT MET" in tool.judge("poisson", envelope, series)[0]  # 4 points under at load 1


def test_priority_is_judged_where_fcfs_drops_the_interactive_tenant_below_80(tool) -> None:
    both = {"interactive": 0.7, "batch": 1.0}
    data = [row("fcfs", c, 1.0, 0.8, both) for c in (1, 2, 4, 8, 16)]
    data += [row("aimd", 16, 1.0, 0.8, both), row("priority", 16, 1.0, 0.97, {"interactive": 0.96, "batch": 0.9})]
    _, envelope, series = tool.table("bursty", data)
    lines = tool.judge("bursty", envelope, series)
    assert any(line.startswith("priority at load 1") and "interactive 96.0% — MET" in line
               and "batch 90.0% vs fcfs 100.0%" in line for line in lines), lines
    assert any("aimd >= 5 points above the best single static cap" in line and "NOT MET" in line for line in lines)


def test_fair_is_judged_by_jain_s_index_beside_fcfs(tool) -> None:
    data = [row("fcfs", 16, 4.0, 1.0, jain=0.72), row("fair", 16, 4.0, 1.0, jain=0.93),
            row("fair-tenant_cap8", 16, 4.0, 1.0, jain=0.88)]
    _, envelope, series = tool.table("backlogged", data)
    lines = tool.judge("backlogged", envelope, series)
    assert "fair at load 4: Jain 0.930 vs fcfs 0.720 — MET (>= 0.9)" in lines
    assert "fair-tenant_cap8 at load 4: Jain 0.880 vs fcfs 0.720 — NOT MET (>= 0.9)" in lines
