"""``fcfs``: the scheduler as it was before policies, step for step."""

from __future__ import annotations

from policy_drive import drive

from batchperf.engine.block_manager import BlockManager
from batchperf.engine.policies import PolicyContext, parse_policy
from batchperf.engine.request import Request
from batchperf.engine.scheduler import SchedulerConfig


def test_no_policy_is_fcfs_and_schedules_step_for_step_as_an_explicit_fcfs():
    def steps(policy):
        requests = [Request(i, tuple(range(1, 3 + 2 * i)), 3 + i % 3, priority=i % 2) for i in range(7)]
        blocks = BlockManager(9, 2)
        _, runner, _ = drive(requests, SchedulerConfig(2), blocks, policy)
        return [[(item.request.request_id, item.num_new) for item in step] for step in runner.steps]

    explicit = steps(parse_policy("fcfs").build(PolicyContext(2)))
    assert steps(None) == explicit and len(explicit) > 7


def test_fcfs_caps_at_the_cells_batch_size_and_preempts_the_newest():
    policy = parse_policy("fcfs").build(PolicyContext(3))
    queue = [Request(i, (1,), 1) for i in range(5)]
    assert policy.cap(queue, []) == 3 and policy.select(queue, []) is queue[0]
    assert policy.victim(queue) is queue[-1] and list(policy.displaceable(queue[0], queue[1:])) == []
