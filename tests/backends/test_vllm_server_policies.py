"""vllm-server under --batchperf-policies (issue 27): fcfs sends no priorities (vLLM's fcfs refuses them), priority
sends each request's; the trace says which scheduling policy ran; another policy is not run (the cell skips)."""

from __future__ import annotations

import pytest
from fake_openai_server import fake_server

from batchperf.backends import CellUnsupported, create_backend
from batchperf.backends.cell_run import run_cell
from batchperf.engine.policies import parse_policy
from batchperf.workload.spec import LengthSpec, RequestSpec, Workload, WorkloadSpec


def two_tenants() -> Workload:
    spec = WorkloadSpec(4, LengthSpec(4, 4), output_lens=(2,))
    requests = tuple(RequestSpec(i, (1, 2, 3, 4), 2, 0.01 * i, tenant=("chat", "batch")[i % 2], priority=i % 2)
                     for i in range(4))
    return Workload(spec, requests, unlimited=True)


@pytest.mark.parametrize(("policy", "sent"), [("fcfs", []), ("priority", [1, 1])])
def test_the_policy_decides_whether_priorities_are_sent(tiny_model, policy: str, sent: list[int]) -> None:
    """Under priority vLLM's body field carries each priority but 0 (vLLM's default); under fcfs none at all."""
    with fake_server(metrics=None, root=str(tiny_model.path)) as server:
        backend = create_backend("vllm-server", tiny_model, server_url=f"2={server.url}")
        trace = run_cell(backend, two_tenants(), 2, 2, policy=parse_policy(policy))
    assert len(server.payloads) == 4
    assert [p["priority"] for p in server.payloads if "priority" in p] == sent
    assert trace.policy == {"engine": "vllm", "scheduling_policy": policy, "server": "given"}
    assert [r.priority for r in trace.requests] == [0, 1, 0, 1]  # the trace keeps the requests' own


def test_a_policy_vllm_does_not_have_is_refused_before_anything_runs(tiny_model) -> None:
    with fake_server(metrics=None, root=str(tiny_model.path)) as server:
        backend = create_backend("vllm-server", tiny_model, server_url=f"2={server.url}")
        with pytest.raises(CellUnsupported, match="policy 'aimd' is not one vllm-server runs: it runs fcfs, priority"):
            run_cell(backend, two_tenants(), 2, 2, policy=parse_policy("aimd"))
        assert server.payloads == []
