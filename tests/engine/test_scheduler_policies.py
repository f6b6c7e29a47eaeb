"""The scheduler's policy hook: fcfs is today's scheduler, every policy keeps the scheduler's invariants, and a
policy that answers outside what it was offered is stopped."""

from __future__ import annotations

import pytest
from fake_model import FakeRunner, reference
from hypothesis import given, settings
from hypothesis import strategies as st
from policy_drive import drive

from batchperf.engine.block_manager import BlockManager, blocks_for
from batchperf.engine.llm_engine import LLMEngine
from batchperf.engine.policies import KNOWN_POLICIES, Policy, PolicyContext, StepReport, TenantTargets, parse_policy
from batchperf.engine.request import Request, Status
from batchperf.engine.scheduler import Scheduler, SchedulerConfig

TENANTS = {"chat": TenantTargets(ttft_ms=100, tpot_ms=30, priority=0),
           "batch": TenantTargets(ttft_ms=1000, tpot_ms=100, priority=1, weight=2.0)}


def requests_from(rows: list[tuple[int, int, float, int]]) -> list[Request]:
    """(prompt length, target, arrival s, tenant index) rows -> requests; tenant 0 is urgent (priority 0)."""
    names = ("chat", "batch")
    return [Request(i, tuple(range(1, p + 1)), t, arrival, priority=k, tenant=names[k])
            for i, (p, t, arrival, k) in enumerate(rows)]


# every policy with its defaults, and settings that reach the branches defaults seldom reach in a dozen requests
ENTRIES = (*KNOWN_POLICIES, "seed:threshold_high=1,optimal_batch=1", "aimd:window=1,target_ms=22",
           "fair:tenant_cap=1")


@settings(max_examples=80, deadline=None)
@given(
    name=st.sampled_from(ENTRIES),
    rows=st.lists(st.tuples(st.integers(1, 30), st.integers(1, 10), st.floats(0, 0.3), st.integers(0, 1)),
                  min_size=1, max_size=12),
    batch_size=st.integers(1, 5),
    block_size=st.sampled_from([1, 2, 4]),
    spare_blocks=st.integers(0, 12),
    budget=st.one_of(st.none(), st.integers(0, 20)),
)
def test_every_policy_keeps_the_schedulers_invariants(name, rows, batch_size, block_size, spare_blocks, budget):
    """No request lost or duplicated, blocks never over-committed, steps within the cap (policy_drive checks
    these every step), and every request finishes with what it would generate alone when the pool can hold it."""
    requests = requests_from(rows)
    largest = max(blocks_for(r.prompt_len + r.target_len - 1, block_size) for r in requests)
    blocks = BlockManager(largest + spare_blocks, block_size)
    config = SchedulerConfig(batch_size, None if budget is None else batch_size + budget)
    policy = parse_policy(name).build(PolicyContext(batch_size, TENANTS))
    _, _, log = drive(requests, config, blocks, policy)
    assert sorted(r.request_id for r in log.finished) == [r.request_id for r in requests]
    for request in requests:
        assert request.status is Status.FINISHED and request.output_ids == reference(request)
    assert blocks.num_used == 0


def test_a_policy_built_for_another_batch_size_is_refused():
    with pytest.raises(ValueError, match="built for batch size 4, the scheduler runs 2"):
        Scheduler(SchedulerConfig(2), BlockManager(8, 4), parse_policy("fcfs").build(PolicyContext(4)))


class _Rogue(Policy):
    def __init__(self, ctx: PolicyContext, cap: object = 1, pick: Request | None = None) -> None:
        super().__init__(ctx)
        self._cap, self._pick = cap, pick

    def cap(self, waiting, running):
        return self._cap

    def select(self, waiting, running):
        return self._pick or super().select(waiting, running)


@pytest.mark.parametrize("cap", [0, 1.5, True])
def test_a_policy_cap_below_one_or_not_an_integer_stops_the_step(cap):
    scheduler = Scheduler(SchedulerConfig(2), BlockManager(8, 4), _Rogue(PolicyContext(2), cap=cap))
    scheduler.add(Request(0, (1,), 1))
    with pytest.raises(RuntimeError, match=f"gave a running cap of {cap!r}; a cap is an integer >= 1"):
        scheduler.schedule()


def test_a_policy_that_selects_a_request_not_waiting_is_stopped():
    stranger = Request(9, (1,), 1)
    scheduler = Scheduler(SchedulerConfig(2), BlockManager(8, 4), _Rogue(PolicyContext(2), cap=2, pick=stranger))
    scheduler.add(Request(0, (1,), 1))
    with pytest.raises(RuntimeError, match=r"gave a selection \(request 9\) it was not offered"):
        scheduler.schedule()


class _Recorder(Policy):
    def __init__(self, ctx: PolicyContext) -> None:
        super().__init__(ctx)
        self.reports: list[StepReport] = []

    def observe(self, report: StepReport) -> None:
        self.reports.append(report)


class _TickClock:
    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> float:
        self.t += 0.25
        return self.t


def test_the_engine_times_each_step_for_the_policy_with_its_clock():
    recorder, blocks = _Recorder(PolicyContext(2)), BlockManager(16, 4)
    engine, clock = LLMEngine(SchedulerConfig(2), blocks, FakeRunner(blocks), recorder), _TickClock()
    first, second, third = Request(0, (1, 2, 3), 1), Request(1, (4, 5), 2), Request(2, (6,), 1)
    for request in (first, second, third):
        engine.add(request)
    finished = engine.step(clock)
    (report,) = recorder.reports
    assert (report.start, report.end, report.duration_ms) == (0.25, 0.5, 250.0)  # the reads before and after
    assert report.requests == (first, second) and report.num_tokens == 5 and report.finished == tuple(finished)
    assert (report.cap, report.running, report.waiting, report.cap_limited) == (2, 2, 1, True)
    engine.step(clock)
    assert recorder.reports[1].requests == (second, third) and recorder.reports[1].finished == (second, third)
