"""The judgeability rules the gate and ``ab`` share (regress/judgeable.py): which figures a client-bound run or
arrival timing set, and the exact tolerance. The gate's use of them: tests/regress/test_gate_client_bound.py and
tests/regress/test_gate.py; ab's: tests/ab/test_client_bound.py and tests/ab/test_exact.py."""

from __future__ import annotations

import pytest
from gate_samples import CLIENT_LAG_REASON as REASON
from gate_samples import cell_info
from gate_samples import client_bound as bound

from batchperf.measure.catalogue import Direction
from batchperf.measure.kv import PADDED_LAYOUT
from batchperf.regress.gate import not_judged
from batchperf.regress.judgeable import (
    ARRIVAL_DEPENDENT,
    EXACT_REL,
    arrival_reason,
    client_bound_note,
    client_bound_reason,
)
from batchperf.regress.verdict import MetricVerdict, Verdict
from batchperf.results.record import CellRecord


def test_a_client_bound_run_names_its_side_and_its_rounds() -> None:
    assert client_bound_note(cell_info(), "this run") is None
    assert client_bound_note(bound(cell_info()), "A") == f"client-bound (A): round 1 of 3: {REASON}"


def test_its_latencies_are_the_client_s_and_its_throughput_only_when_the_server_was_underfed() -> None:
    saturated, underfed = bound(cell_info(), saturated=True), bound(cell_info(), saturated=False)
    for record in (saturated, underfed):
        assert client_bound_reason("metrics.p99_ttft_ms", record, "B") == f"client-bound (B): round 1 of 3: {REASON}"
        assert client_bound_reason("kv.bytes_per_token_measured", record, "B") is None  # not a latency
    assert client_bound_reason("metrics.output_throughput", saturated, "B") is None  # the server was kept full
    why = client_bound_reason("metrics.output_throughput", underfed, "B")
    assert why is not None and "the server was not kept saturated (occupancy 0.40)" in why
    assert client_bound_reason("metrics.p99_ttft_ms", cell_info(), "B") is None  # an unmarked run


@pytest.mark.parametrize("tenant", ["chat", "chat.v2", "a[b]_ms"])
def test_one_tenants_latency_named_as_the_gate_names_it_is_the_client_s_too(tenant: str) -> None:
    """The gate names one tenant's verdict PATH[TENANT] (``tenants.p99_ttft_ms[chat]``): the rule read the name's
    end, "]", and missed every per-tenant latency and throughput of a client-bound run."""
    underfed = bound(cell_info(), saturated=False)
    assert client_bound_reason(f"tenants.p99_ttft_ms[{tenant}]", underfed, "B") == \
        f"client-bound (B): round 1 of 3: {REASON}"
    why = client_bound_reason(f"tenants.output_throughput[{tenant}]", underfed, "B")
    assert why is not None and "the server was not kept saturated" in why
    assert client_bound_reason(f"tenants.attainment[{tenant}]", underfed, "B") is None  # not a latency
    # the gate's own use: that tenant's latency verdict in a client-bound run is not judged
    judged = MetricVerdict(f"tenants.p99_ttft_ms[{tenant}]", Direction.LOWER, Verdict.REGRESSION, 100.0, 150.0, 0.5,
                           0.1)
    assert not_judged(judged, cell_info(), underfed).verdict is Verdict.NOT_JUDGED
    assert not_judged(judged, cell_info(), cell_info()).verdict is Verdict.REGRESSION


def test_padded_figures_under_open_loop_arrivals_depend_on_arrival_timing() -> None:
    record = cell_info()
    record.kv["kv_layout"] = PADDED_LAYOUT
    record.workload["open_loop"] = True
    for path in ARRIVAL_DEPENDENT:
        why = arrival_reason(path, record)
        assert why is not None and why.startswith("depends on arrival timing")
    assert arrival_reason("kv.bytes_per_token_measured", record) is None  # per token: exact even there
    record.workload["open_loop"] = False
    assert all(arrival_reason(path, record) is None for path in ARRIVAL_DEPENDENT)  # closed loop: request order


def test_exact_allows_float_rounding_only() -> None:
    assert 0 < EXACT_REL < 1e-6


def test_a_capacity_records_probe_figures_are_reported_and_its_capacity_decides() -> None:
    # seven quiet searches on one host: four of 42 pairs were called on the nearest probe's P99 TTFT and attainment
    # (one run of one process), none on the capacity
    from batchperf.regress.gate import compare_cell
    from batchperf.regress.judgeable import capacity_probe_reason

    def search(capacity: float, p99: float) -> CellRecord:
        record = cell_info("cpu-tiny-qwen2-continuous-bs4-p64-c64-capacity", p99=p99)
        record.capacity = {"max_load": capacity, "spread": 0.05, "max_request_rate": 4 * capacity,
                           "target_attainment": 0.9}
        return record

    base = search(3.3, p99=50.0)
    assert capacity_probe_reason("capacity.max_load", base) is None
    assert "one probe's single run" in capacity_probe_reason("metrics.p99_ttft_ms", base)
    assert capacity_probe_reason("metrics.p99_ttft_ms", cell_info()) is None  # an ordinary cell: it decides
    slower_probe = compare_cell("c", base, search(3.3, p99=80.0))  # the probe's P99 60% worse, the capacity alike
    p99 = next(m for m in slower_probe.metrics if m.metric == "metrics.p99_ttft_ms")
    assert p99.verdict is Verdict.REGRESSION and not p99.deciding and slower_probe.verdict is Verdict.NO_CHANGE
    lower = compare_cell("c", base, search(2.5, p99=50.0))  # 24% less capacity: called
    assert lower.verdict is Verdict.REGRESSION


def test_a_capacity_search_that_never_bracketed_the_crossing_is_not_judged() -> None:
    """A search stopped by its budget (or a probes folder's end) before a bracket states the highest load that met:
    a bound, not a capacity. Its capacity figures are not judged, on either side; a fitted one, a load-range stop
    and a bisection's record from before issue 57 are."""
    from batchperf.regress.gate import compare_cell
    from batchperf.regress.judgeable import unbracketed_reason

    def search(capacity: float, **section: object) -> CellRecord:
        record = cell_info("cpu-tiny-qwen2-continuous-bs4-p64-c64-capacity")
        record.capacity = {"max_load": capacity, "spread": 0.05, "max_request_rate": 4 * capacity,
                           "target_attainment": 0.9, **section}
        return record

    fitted = search(3.3, stopped="budget", interval_low=3.1, interval_high=3.5)
    bound = search(2.0, stopped="budget")
    assert "bracketed" in unbracketed_reason("capacity.max_load", bound, "this run")
    assert unbracketed_reason("metrics.p99_ttft_ms", bound, "this run") is None  # not a capacity figure
    for judged in (fitted, search(64.0, stopped="max_load"), search(2.0, stopped="budget", bracket_high=2.1)):
        assert unbracketed_reason("capacity.max_load", judged, "this run") is None
    for base, current in ((fitted, bound), (bound, fitted)):
        got = next(m for m in compare_cell("c", base, current).metrics if m.metric == "capacity.max_load")
        assert got.verdict is Verdict.NOT_JUDGED and "a bound, not a capacity" in got.note
    lower = next(m for m in compare_cell("c", fitted, search(2.0, stopped="probes", interval_low=1.9,
                                                              interval_high=2.1)).metrics
                 if m.metric == "capacity.max_load")
    assert lower.verdict is Verdict.REGRESSION  # fitted on both sides: judged
