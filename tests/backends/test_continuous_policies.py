"""The continuous backend runs the cell's batching policy (issue 27): the context it builds from the workload's
tenants, what the run records of the policy, and a policy the cell's workload cannot give what it needs."""

from __future__ import annotations

import pytest

from batchperf.backends import CellUnsupported, create_backend
from batchperf.backends.cell_run import run_cell
from batchperf.backends.continuous import policy_context
from batchperf.engine.policies import TenantTargets, parse_policy
from batchperf.workload.spec import LengthSpec, WorkloadSpec
from batchperf.workload.traffic import parse_workload

TENANTS = """seed = 0
[tenants.chat]
requests = 4
rate = 50.0
prompt_len = 12
output_lens = [3]
priority = 0
slo = { ttft_ms = 400, tpot_ms = 60 }

[tenants.batch]
requests = 3
rate = 50.0
prompt_len = 24
output_lens = [4]
priority = 2
slo = { e2el_ms = 9000 }
"""


@pytest.fixture
def tenants(tiny_model, tmp_path):
    path = tmp_path / "t.toml"
    path.write_text(TENANTS)
    base = WorkloadSpec(7, LengthSpec(12, 12), output_lens=(3,))
    return parse_workload(f"tenants:{path}", base).build(tiny_model.vocab_size, tiny_model.max_model_len)


def test_the_context_holds_each_tenants_slos_and_priority_and_the_batch_size(tenants) -> None:
    ctx = policy_context(tenants, 3)
    assert ctx.batch_size == 3
    assert ctx.tenants == {"chat": TenantTargets(400, 60, None, priority=0),
                           "batch": TenantTargets(None, None, 9000, priority=2)}
    assert ctx.step_target_ms() == 60


@pytest.mark.parametrize("policy", ["aimd", "fair", "priority", "seed"])
def test_each_policy_runs_every_request_to_its_target_and_records_its_state(tiny_model, tenants, policy) -> None:
    backend = create_backend("continuous", tiny_model)
    try:
        trace = run_cell(backend, tenants, 3, 8, policy=parse_policy(policy))
    finally:
        backend.close()
    assert sorted(r.request_id for r in trace.requests) == list(range(7))
    assert all(r.output_len == r.target_len for r in trace.requests)
    assert trace.policy["engine"] == "batchperf" and trace.policy["policy"] == policy
    assert trace.policy["displaced"] >= 0
    if policy == "aimd":
        assert 1 <= trace.policy["cap_min"] <= trace.policy["cap_final"] <= trace.policy["cap_max"] <= 3
    if policy == "fair":  # its counters by tenant: each engine request carried its tenant
        assert set(trace.policy["counters"]) == {"chat", "batch"} and min(trace.policy["counters"].values()) > 0


def test_a_policy_the_workload_gives_no_target_to_is_skipped_with_the_engines_reason(tiny_model) -> None:
    """aimd aims at a step latency from the tightest TTFT/TPOT SLO: a synthetic workload has none."""
    workload = WorkloadSpec(2, LengthSpec(8, 8), output_lens=(2,)).build(tiny_model.vocab_size,
                                                                        tiny_model.max_model_len)
    backend = create_backend("continuous", tiny_model)
    try:
        with pytest.raises(CellUnsupported, match="policy 'aimd' cannot run this cell: .*target"):
            run_cell(backend, workload, 2, 2, policy=parse_policy("aimd"))
    finally:
        backend.close()


@pytest.mark.parametrize("policy, honoured", [("fcfs", "ignored"), ("aimd", "ignored"), ("priority", "honoured")])
def test_the_record_says_whether_the_policy_honoured_the_priorities(tiny_model, policy, honoured):
    """fcfs (as vLLM's) admits in arrival order: the requests' priorities are ignored, and the record says so;
    only the priority policy honours them."""
    from small_runs import TWO_TENANTS, measured_cell

    record = measured_cell(tiny_model, "continuous", batch_size="4", concurrency="16", workload=TWO_TENANTS,
                           policy=policy)
    section = record.workload
    assert section["priority"] == honoured and f"policy {policy}" in section["priority_note"], section
