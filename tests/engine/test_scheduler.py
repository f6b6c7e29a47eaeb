"""The torch-free scheduler and block manager, driven by a fake model that checks the KV pool by hand."""

from __future__ import annotations

import subprocess
import sys

import pytest
from fake_model import FakeRunner, reference
from hypothesis import given, settings
from hypothesis import strategies as st

from batchperf.engine.block_manager import BlockManager, blocks_for
from batchperf.engine.policies import PolicyContext, parse_policy
from batchperf.engine.request import Request, Status
from batchperf.engine.scheduler import Scheduler, SchedulerConfig


def drive(requests: list[Request], config: SchedulerConfig, blocks: BlockManager) -> tuple[Scheduler, FakeRunner]:
    scheduler, runner = Scheduler(config, blocks), FakeRunner(blocks)
    for request in requests:
        scheduler.add(request)
    for t in range(10_000):
        if not scheduler.has_work:
            break
        step = scheduler.schedule(float(t))
        assert step, "work waits but nothing was scheduled"
        assert len(scheduler.running) <= config.batch_size
        assert sum(item.num_new for item in step) <= (config.max_step_tokens or float("inf"))
        held = [b for r in scheduler.running for b in r.block_table]
        assert len(held) == len(set(held)) == blocks.num_used <= blocks.num_blocks
        scheduler.postprocess(step, runner.run(step), float(t))
    else:
        pytest.fail("the scheduler did not finish in 10,000 steps")
    return scheduler, runner


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.tuples(st.integers(1, 40), st.integers(1, 12)), min_size=1, max_size=8),
    batch_size=st.integers(1, 5),
    block_size=st.sampled_from([1, 2, 4, 16]),
    spare_blocks=st.integers(0, 20),
    budget=st.one_of(st.none(), st.integers(0, 30)),
)
def test_every_schedule_generates_what_one_request_alone_would(lengths, batch_size, block_size, spare_blocks, budget):
    requests = [Request(i, tuple(range(1, p + 1)), t) for i, (p, t) in enumerate(lengths)]
    # the pool holds the largest request plus a few blocks: small enough to preempt often
    largest = max(blocks_for(r.prompt_len + r.target_len - 1, block_size) for r in requests)
    blocks = BlockManager(largest + spare_blocks, block_size, bytes_per_block=64)
    config = SchedulerConfig(batch_size, None if budget is None else batch_size + budget)
    drive(requests, config, blocks)
    for request in requests:
        assert request.status is Status.FINISHED
        assert request.output_ids == reference(request)
        assert len(request.token_times) == request.target_len
        held = request.prompt_len + request.target_len - 1  # the last token is never fed back
        assert request.peak_tokens == held
        assert request.peak_blocks == blocks_for(held, block_size)
    assert blocks.num_used == 0 and blocks.bytes_in_use == 0


def test_finished_requests_leave_at_once_and_their_slot_is_refilled_next_step():
    requests = [Request(i, (1, 2, 3), target) for i, target in enumerate([2, 4, 4, 4])]
    _, runner = drive(requests, SchedulerConfig(batch_size=2), BlockManager(32, 4))
    ids = [[item.request.request_id for item in step] for step in runner.steps]
    # step 0: prefill 0 and 1 (first tokens); step 1: both decode, 0 finishes; step 2: 2 is admitted at once
    assert ids[:3] == [[0, 1], [0, 1], [1, 2]]
    assert all(len(step) <= 2 for step in ids)


def test_admission_is_fifo_and_waits_for_free_blocks():
    blocks = BlockManager(3, 4)
    scheduler = Scheduler(SchedulerConfig(batch_size=4), blocks)
    blocker, big, small = Request(2, (1, 2), 1), Request(0, tuple(range(1, 10)), 1), Request(1, (1,), 1)
    for request in (blocker, big, small):
        scheduler.add(request)
    step = scheduler.schedule()
    # blocker takes a block; big needs 3 of the 2 left, and small must not overtake it
    assert [item.request.request_id for item in step] == [2]
    scheduler.postprocess(step, [7], 0.0)
    assert [item.request.request_id for item in scheduler.schedule()] == [0]


def test_preemption_frees_the_newest_request_and_recomputes_it():
    first, second = Request(0, (1, 2, 3), 4), Request(1, (4, 5, 6), 4)
    scheduler, runner = drive([first, second], SchedulerConfig(batch_size=2), BlockManager(4, 2))
    assert second.preemptions >= 1 and first.preemptions == 0
    assert scheduler.num_preemptions == second.preemptions
    recompute = [item for step in runner.steps for item in step if item.request is second and item.num_new > 1]
    assert recompute[-1].num_new > second.prompt_len  # the prompt and the tokens it had made
    assert second.output_ids == reference(second) and first.output_ids == reference(first)


def test_chunked_prefill_respects_the_token_budget():
    request = Request(0, tuple(range(1, 11)), 2)
    _, runner = drive([request], SchedulerConfig(batch_size=1, max_step_tokens=4), BlockManager(8, 4))
    assert [item.num_new for step in runner.steps for item in step] == [4, 4, 2, 1]
    assert [item.samples for step in runner.steps for item in step] == [False, False, True, True]
    assert request.output_ids == reference(request)


def test_a_request_larger_than_the_pool_is_refused_with_the_fix():
    scheduler = Scheduler(SchedulerConfig(batch_size=1), BlockManager(2, 4))
    with pytest.raises(ValueError, match="needs 3 KV blocks.*pool has 2.*more KV blocks"):
        scheduler.add(Request(0, tuple(range(1, 10)), 2))


def test_postprocess_needs_one_result_per_scheduled_request():
    scheduler = Scheduler(SchedulerConfig(batch_size=1), BlockManager(2, 4))
    scheduler.add(Request(0, (1, 2), 2))
    with pytest.raises(ValueError, match="got 0 sampled tokens for a step of 1"):
        scheduler.postprocess(scheduler.schedule(), [], 0.0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"batch_size": 0}, "batch_size"), ({"batch_size": 4, "max_step_tokens": 3}, "max_step_tokens")],
)
def test_config_validation(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SchedulerConfig(**kwargs)


def test_the_engine_but_the_runner_never_imports_torch():
    code = (
        "import sys; sys.modules['torch'] = None\n"  # any `import torch` now raises ImportError
        "import batchperf.engine, batchperf.engine.request, batchperf.engine.block_manager\n"
        "import batchperf.engine.scheduler, batchperf.engine.llm_engine, batchperf.engine.policies\n"
        "print('torch-free')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "torch-free"


@pytest.mark.parametrize("policy, order", [(None, [0, 1, 2, 3]), ("fcfs", [0, 1, 2, 3]), ("priority", [1, 3, 0, 2])])
def test_fcfs_admits_in_arrival_order_and_priority_by_priority_fifo_within_one(policy, order):
    """fcfs is vLLM's: arrival order whatever the requests' priorities; the priority policy admits lower first."""
    built = None if policy is None else parse_policy(policy).build(PolicyContext(batch_size=1))
    scheduler = Scheduler(SchedulerConfig(batch_size=1), BlockManager(num_blocks=64, block_size=4), built)
    for rid, priority in ((0, 1), (1, 0), (2, 1), (3, 0)):
        scheduler.add(Request(rid, (1, 2), 1, priority=priority))
    admitted = []
    for now in range(4):
        step = scheduler.schedule(float(now))
        admitted += [s.request.request_id for s in step]
        scheduler.postprocess(step, [7] * len(step), float(now) + 0.5)  # one token each: every request ends
    assert admitted == order
