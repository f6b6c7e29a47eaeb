"""Which vLLM scheduling policy a run uses (issue 27), and what the workload section says of the priorities."""

from __future__ import annotations

from batchperf.backends.vllm_policy import priority_note, runs_priority, vllm_policy
from batchperf.engine.policies import parse_policy
from batchperf.workload.spec import LengthSpec, RequestSpec, Workload, WorkloadSpec


def workload(*priorities: int) -> Workload:
    spec = WorkloadSpec(len(priorities), LengthSpec(4, 4), output_lens=(2,))
    return Workload(spec, tuple(RequestSpec(i, (1, 2, 3, 4), 2, 0.0, priority=p) for i, p in enumerate(priorities)))


def test_the_policy_given_decides_and_without_one_the_priorities_do() -> None:
    assert runs_priority(workload(0, 1), parse_policy("fcfs")) is False  # fcfs: vLLM's fcfs, whatever they carry
    assert runs_priority(workload(0, 0), parse_policy("priority")) is True
    assert runs_priority(workload(0, 1), None) is True and runs_priority(workload(0, 0), None) is False


def test_the_record_says_what_ran() -> None:
    assert vllm_policy(True) == {"engine": "vllm", "scheduling_policy": "priority"}
    assert vllm_policy(False)["scheduling_policy"] == "fcfs"
    assert priority_note("vllm", False) == (False, "vllm: policy fcfs: vLLM's fcfs scheduling policy, in arrival "
                                                   "order (priorities not sent)")
    assert priority_note("vllm-server", True)[0] is True
