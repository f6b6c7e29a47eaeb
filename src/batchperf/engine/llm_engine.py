"""The engine: a scheduler, a block manager and a model runner wired into one ``step()``.

Torch-free: the runner is a :class:`StepRunner`, anything with ``run(step) -> list[int | None]`` (the
real one, :class:`batchperf.engine.model_runner.ModelRunner`, owns the
tensors; tests pass a fake). The clock is read before a step, to stamp first
admissions, and after it, to stamp the step's tokens; the caller's clock
synchronises the device on every read, so the second read is when those tokens
exist. The same two reads time the step for the scheduler's policy (its ``observe``), so a policy that
adapts (aimd, seed) sees the step's measured duration.
"""

from __future__ import annotations

from typing import Protocol

from batchperf.engine.block_manager import BlockManager
from batchperf.engine.policies.base import Policy
from batchperf.engine.request import Request
from batchperf.engine.scheduler import Scheduled, Scheduler, SchedulerConfig
from batchperf.engine.stats import StepStats


class StepRunner(Protocol):
    def run(self, step: list[Scheduled]) -> list[int | None]:
        """One forward pass over ``step``: the token sampled for each item, None for a prompt chunk."""
        ...


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the run started, read after the device finished its queued work."""
        ...


class LLMEngine:
    def __init__(self, config: SchedulerConfig, blocks: BlockManager, runner: StepRunner,
                 policy: Policy | None = None) -> None:
        self.blocks = blocks
        self.scheduler = Scheduler(config, blocks, policy)
        self.runner = runner
        self.stats = StepStats()

    def add(self, request: Request) -> None:
        self.scheduler.add(request)

    @property
    def has_work(self) -> bool:
        return self.scheduler.has_work

    def step(self, clock: Clock) -> list[Request]:
        """Schedule, run one forward pass, record its tokens; return the requests that finished."""
        step = self.scheduler.schedule(clock.now())
        if not step:
            raise RuntimeError(f"requests wait but none could be scheduled ({self.blocks.num_blocks} KV blocks)")
        self.stats.observe(len(step), sum(s.num_new for s in step), len(self.scheduler.running),
                           len(self.scheduler.waiting))
        sampled = self.runner.run(step)
        return self.scheduler.postprocess(step, sampled, clock.now())
