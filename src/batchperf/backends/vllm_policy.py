"""The batching policies vLLM runs (``--batchperf-policies`` on the ``vllm`` and ``vllm-server`` backends).

vLLM has two scheduling policies: ``fcfs`` (arrival order; a request's priority must be 0) and ``priority``
(each request's priority, lower first, arrival order within one; when KV blocks run short the lowest-priority
running request is preempted). ``fcfs`` sends no priorities, so the same tenants' traffic is served in arrival
order; ``priority`` sends them. Without a policy (a caller outside the suite) a workload whose requests carry
priorities runs ``priority``, as issue 24 made it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from batchperf.engine.policies import PolicySpec
    from batchperf.workload.spec import Workload

VLLM_POLICIES = ("fcfs", "priority")


def runs_priority(workload: Workload, policy: PolicySpec | None) -> bool:
    """vLLM's ``scheduling_policy="priority"`` for this run."""
    return workload.uses_priority if policy is None else policy.name == "priority"


def vllm_policy(priority: bool) -> dict[str, Any]:
    """What the run's ``RunTrace.policy`` says of vLLM's scheduler."""
    return {"engine": "vllm", "scheduling_policy": "priority" if priority else "fcfs"}


def priority_note(backend: str, priority: bool) -> tuple[bool, str]:
    """(honoured, why) of the requests' priorities under the policy the backend runs."""
    if priority:
        return True, f"{backend}: vLLM's priority scheduling policy, each request's priority (lower first)"
    return False, f"{backend}: policy fcfs: vLLM's fcfs scheduling policy, in arrival order (priorities not sent)"

