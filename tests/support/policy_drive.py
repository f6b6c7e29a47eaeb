"""Drive the engine's scheduler under a policy on a fake clock, checking the scheduler's invariants every step.

Requests arrive at their ``arrival`` time (s); a step lasts ``step_ms(step)`` of fake time, so a policy that
adapts to measured latency sees a latency that grows with the batch. The fake model (fake_model.FakeRunner)
checks the KV pool by hand.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from fake_model import FakeRunner

from batchperf.engine.block_manager import BlockManager
from batchperf.engine.policies import Policy
from batchperf.engine.request import Request, Status
from batchperf.engine.scheduler import Scheduled, Scheduler, SchedulerConfig


def linear_ms(base: float = 10.0, per_request: float = 5.0) -> Callable[[list[Scheduled]], float]:
    """A step costs ``base`` ms plus ``per_request`` ms per scheduled request."""
    return lambda step: base + per_request * len(step)


@dataclass
class Log:
    caps: list[int] = field(default_factory=list)  # the cap the policy gave, per step
    sizes: list[int] = field(default_factory=list)  # requests scheduled, per step
    running: list[int] = field(default_factory=list)  # running after scheduling, per step
    times: list[float] = field(default_factory=list)  # s: each step's end
    finished: list[Request] = field(default_factory=list)


def drive(requests: list[Request], config: SchedulerConfig, blocks: BlockManager, policy: Policy | None = None,
          step_ms: Callable[[list[Scheduled]], float] = linear_ms(), max_steps: int = 20_000,
          on_step: Callable[[Scheduler, list[Scheduled]], None] | None = None) -> tuple[Scheduler, FakeRunner, Log]:
    """Run ``requests`` to completion; assert the invariants that hold under every policy at every step."""
    scheduler, runner, log = Scheduler(config, blocks, policy), FakeRunner(blocks), Log()
    pending = sorted(requests, key=lambda r: (r.arrival, r.request_id))
    now = 0.0
    for _ in range(max_steps):
        while pending and pending[0].arrival <= now:
            scheduler.add(pending.pop(0))
        if not scheduler.has_work:
            if not pending:
                break
            now = pending[0].arrival
            continue
        before = len(scheduler.running)
        step = scheduler.schedule(now)
        assert step, "work waits but nothing was scheduled"
        report_cap = scheduler.cap
        assert len(step) <= report_cap, "a step ran more requests than the cap"
        assert len(scheduler.running) <= max(report_cap, before), "admission lifted the running set above the cap"
        assert len({id(item.request) for item in step}) == len(step), "a request scheduled twice in one step"
        assert sum(item.num_new for item in step) <= (config.max_step_tokens or float("inf"))
        held = [b for r in scheduler.running for b in r.block_table]
        assert len(held) == len(set(held)) == blocks.num_used <= blocks.num_blocks, "blocks over-committed"
        ids = [r.request_id for r in (*scheduler.waiting, *scheduler.running, *log.finished, *pending)]
        assert sorted(ids) == sorted(r.request_id for r in requests), "a request was lost or duplicated"
        assert all(r.status is Status.WAITING for r in scheduler.waiting)
        assert all(r.status is Status.RUNNING for r in scheduler.running)
        log.caps.append(report_cap)
        log.sizes.append(len(step))
        log.running.append(len(scheduler.running))
        if on_step is not None:
            on_step(scheduler, step)
        now += step_ms(step) / 1e3
        log.finished += scheduler.postprocess(step, runner.run(step), now)
        log.times.append(now)
    else:
        raise AssertionError(f"the scheduler did not finish in {max_steps} steps")
    return scheduler, runner, log
