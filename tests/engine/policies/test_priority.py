"""``priority``: the most urgent waiting request is admitted first, and an urgent arrival preempts less urgent
running requests (recompute) when the cap or the KV blocks are full; equal or more urgent ones are never
displaced."""

from __future__ import annotations

import pytest
from fake_model import FakeRunner, reference
from policy_drive import drive

from batchperf.engine.block_manager import BlockManager
from batchperf.engine.policies import PolicyContext, parse_policy
from batchperf.engine.request import Request, Status
from batchperf.engine.scheduler import Scheduler, SchedulerConfig


def scheduler_for(batch_size: int, num_blocks: int, block_size: int = 4, name: str = "priority") -> Scheduler:
    return Scheduler(SchedulerConfig(batch_size), BlockManager(num_blocks, block_size),
                     parse_policy(name).build(PolicyContext(batch_size)))


def run_step(scheduler: Scheduler, runner: FakeRunner, now: float = 0.0) -> list[int]:
    step = scheduler.schedule(now)
    scheduler.postprocess(step, runner.run(step), now)
    return [item.request.request_id for item in step]


def test_the_most_urgent_waiting_request_is_admitted_first_fifo_within_a_priority():
    scheduler = scheduler_for(1, 64)
    runner = FakeRunner(scheduler.blocks)
    for rid, priority in ((0, 2), (1, 1), (2, 2), (3, 1)):
        scheduler.add(Request(rid, (1, 2), 1, priority=priority))
    assert [run_step(scheduler, runner) for _ in range(4)] == [[1], [3], [0], [2]]


def test_an_urgent_arrival_displaces_the_least_urgent_newest_running_request_when_the_cap_is_full():
    scheduler = scheduler_for(2, 64)
    runner = FakeRunner(scheduler.blocks)
    old_low, new_low, urgent = Request(0, (1, 2), 5, priority=3), Request(1, (3, 4), 5, priority=3), \
        Request(2, (5, 6), 2, priority=0)
    scheduler.add(old_low)
    scheduler.add(new_low)
    assert run_step(scheduler, runner) == [0, 1]
    scheduler.add(urgent)
    assert run_step(scheduler, runner) == [0, 2]  # new_low's decode was unscheduled, urgent prefilled
    assert new_low.status is Status.WAITING and new_low.preemptions == 1 and new_low.block_table == []
    assert new_low.num_cached == 0 and new_low.num_generated == 1  # recompute: its token is kept, its KV is not
    assert scheduler.policy.state()["displaced"] == 1 and scheduler.num_preemptions == 1
    while scheduler.has_work:
        run_step(scheduler, runner)
    assert all(r.output_ids == reference(r) for r in (old_low, new_low, urgent))


def test_an_urgent_arrival_displaces_as_many_as_free_the_blocks_it_needs_and_no_more():
    scheduler = scheduler_for(4, 6, block_size=2)
    runner = FakeRunner(scheduler.blocks)
    low = [Request(i, (1, 2, 3), 4, priority=5) for i in range(3)]  # 2 blocks each: the pool is full
    for request in low:
        scheduler.add(request)
    assert run_step(scheduler, runner) == [0, 1, 2]
    scheduler.add(Request(9, (1, 2, 3, 4, 5, 6, 7), 1, priority=0))  # needs 4 blocks
    assert run_step(scheduler, runner) == [0, 9]
    assert [r.preemptions for r in low] == [0, 1, 1]


def test_equal_or_more_urgent_running_requests_are_never_displaced():
    scheduler = scheduler_for(1, 64)
    runner = FakeRunner(scheduler.blocks)
    scheduler.add(Request(0, (1, 2), 3, priority=1))
    run_step(scheduler, runner)
    scheduler.add(Request(1, (1, 2), 1, priority=1))
    scheduler.add(Request(2, (1, 2), 1, priority=4))
    assert run_step(scheduler, runner) == [0] and scheduler.num_preemptions == 0


def test_no_displacement_when_preempting_every_less_urgent_request_would_not_make_room():
    scheduler = scheduler_for(4, 5, block_size=2)
    runner = FakeRunner(scheduler.blocks)
    urgent_running, low = Request(0, (1, 2, 3), 3, priority=0), Request(1, (1, 2, 3), 3, priority=5)
    scheduler.add(urgent_running)
    scheduler.add(low)
    run_step(scheduler, runner)  # 2 blocks each, 1 free
    scheduler.add(Request(2, tuple(range(1, 9)), 1, priority=1))  # needs 4: 1 free + low's 2 are not enough
    assert run_step(scheduler, runner) == [0, 1] and low.preemptions == 0


def test_when_blocks_run_out_the_least_urgent_running_request_is_preempted_not_the_newest():
    # fcfs preempts the newest (here the urgent one); priority preempts the least urgent, older though it is
    outcomes = {}
    for name in ("fcfs", "priority"):
        scheduler = scheduler_for(2, 4, block_size=2, name=name)
        low, urgent = Request(0, (1, 2, 3), 4, 0.0, priority=5), Request(1, (4, 5, 6), 4, 0.001, priority=0)
        _, _, log = drive([low, urgent], scheduler.config, scheduler.blocks, scheduler.policy)
        outcomes[name] = (low.preemptions, urgent.preemptions)
        assert low.output_ids == reference(low) and urgent.output_ids == reference(urgent)
    assert outcomes["fcfs"][1] >= 1 and outcomes["fcfs"][0] == 0
    assert outcomes["priority"][0] >= 1 and outcomes["priority"][1] == 0


def test_under_a_stream_of_low_priority_work_urgent_requests_wait_less_than_under_fcfs():
    def waits(name: str) -> float:
        requests = [Request(i, (1, 2, 3), 10, arrival=0.0, priority=5) for i in range(8)]
        requests += [Request(100 + i, (1, 2), 3, arrival=0.05 + 0.1 * i, priority=0) for i in range(4)]
        drive(requests, SchedulerConfig(2), BlockManager(64, 4), parse_policy(name).build(PolicyContext(2)))
        urgent = [r for r in requests if r.priority == 0]
        return max(r.scheduled - r.arrival for r in urgent)

    assert waits("priority") < 0.05 < waits("fcfs")  # admitted at the next step vs behind the running batch


@pytest.mark.parametrize("text", ["priority:preempt=1"])
def test_priority_takes_no_parameters(text):
    with pytest.raises(ValueError, match="priority takes no parameters"):
        parse_policy(text)
