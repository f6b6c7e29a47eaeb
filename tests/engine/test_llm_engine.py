"""The engine's step(): one schedule, one forward pass, tokens stamped with the clock read after it."""

from __future__ import annotations

import pytest
from fake_model import FakeRunner, reference

from batchperf.engine.block_manager import BlockManager
from batchperf.engine.llm_engine import LLMEngine
from batchperf.engine.request import Request, Status
from batchperf.engine.scheduler import Scheduled, SchedulerConfig


class TickClock:
    """Each read is one tick later than the last, so the order of reads shows in the times."""

    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> float:
        self.t += 1.0
        return self.t


class ClockedRunner(FakeRunner):
    """The fake model, noting the clock's time at each forward pass."""

    def __init__(self, blocks: BlockManager, clock: TickClock) -> None:
        super().__init__(blocks)
        self.clock = clock
        self.run_at: list[float] = []

    def run(self, step: list[Scheduled]) -> list[int | None]:
        self.run_at.append(self.clock.t)
        return super().run(step)


def engine_for(batch_size: int, num_blocks: int = 32, block_size: int = 4) -> tuple[LLMEngine, ClockedRunner, TickClock]:
    clock = TickClock()
    blocks = BlockManager(num_blocks, block_size)
    runner = ClockedRunner(blocks, clock)
    return LLMEngine(SchedulerConfig(batch_size), blocks, runner), runner, clock


def test_a_step_schedules_runs_once_and_stamps_its_tokens_after_the_pass():
    engine, runner, clock = engine_for(batch_size=2)
    first, second = Request(0, (1, 2, 3), 2, arrival=0.5), Request(1, (4, 5), 3, arrival=0.5)
    engine.add(first)
    engine.add(second)
    assert engine.has_work
    assert engine.step(clock) == []  # both prefill and sample their first token; neither is done
    assert len(runner.steps) == 1 and runner.run_at == [1.0]  # one pass, after the schedule's read
    assert first.scheduled == second.scheduled == 1.0
    assert first.token_times == second.token_times == [2.0]  # the read after the pass
    assert engine.step(clock) == [first]  # its second token is its last
    assert first.status is Status.FINISHED and first.token_times == [2.0, 4.0]
    assert engine.step(clock) == [second]
    assert second.token_times == [2.0, 4.0, 6.0] and second.scheduled == 1.0  # first admission kept
    assert not engine.has_work
    assert first.output_ids == reference(first) and second.output_ids == reference(second)


def test_stepping_until_idle_generates_what_each_request_alone_would():
    engine, runner, clock = engine_for(batch_size=2, num_blocks=10, block_size=2)  # the largest alone: preempts
    requests = [Request(i, tuple(range(1, 2 + 3 * i)), 4 + i) for i in range(5)]
    for request in requests:
        engine.add(request)
    finished: list[Request] = []
    while engine.has_work:
        finished += engine.step(clock)
    assert sorted(r.request_id for r in finished) == list(range(5))
    assert all(r.output_ids == reference(r) and len(r.token_times) == r.target_len for r in requests)
    assert engine.scheduler.num_preemptions > 0 and engine.blocks.num_used == 0
    assert len(runner.steps) == len(runner.run_at)  # one forward pass per step


def test_a_step_that_can_schedule_nothing_says_so():
    engine, runner, clock = engine_for(batch_size=1, num_blocks=2, block_size=4)
    engine.blocks.reserve(Request(99, (1,), 1), 8)  # something else holds the whole pool
    engine.add(Request(0, (1, 2, 3), 2))
    with pytest.raises(RuntimeError, match=r"none could be scheduled \(2 KV blocks\)"):
        engine.step(clock)
    assert runner.steps == []
