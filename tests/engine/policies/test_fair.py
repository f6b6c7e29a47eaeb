"""``fair``: VTC's counters share service between backlogged tenants (bounded counter difference, a lifted
newcomer, weights), per-tenant caps hold, and the largest counter is preempted first."""

from __future__ import annotations

from collections import Counter, defaultdict

import pytest
from fake_model import FakeRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from policy_drive import drive

from batchperf.engine.block_manager import BlockManager
from batchperf.engine.policies import PolicyContext, TenantTargets, parse_policy
from batchperf.engine.request import Request
from batchperf.engine.scheduler import Scheduler, SchedulerConfig

W_IN, W_OUT = 1.0, 2.0


def backlogged(scheduler: Scheduler) -> set[str]:
    return {r.tenant for r in scheduler.waiting}


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(st.tuples(st.integers(1, 24), st.integers(1, 10), st.floats(0, 0.5), st.sampled_from("ab")),
                  min_size=2, max_size=40),
    batch_size=st.integers(1, 6),
)
def test_the_counters_of_two_backlogged_tenants_stay_within_vtcs_bound(rows, batch_size):
    """While both tenants have a request waiting, their counters differ by at most one prompt's charge plus what
    a full running set can still generate: a constant, however many requests arrive."""
    requests = [Request(i, tuple(range(1, p + 1)), t, arrival, tenant=k) for i, (p, t, arrival, k) in enumerate(rows)]
    bound = W_IN * max(p for p, *_ in rows) + W_OUT * batch_size * max(t for _, t, *_ in rows)
    policy = parse_policy("fair").build(PolicyContext(batch_size))
    gaps: list[float] = []

    def check(scheduler: Scheduler, step) -> None:
        if backlogged(scheduler) == {"a", "b"}:
            gaps.append(abs(policy.counters["a"] - policy.counters["b"]))

    drive(requests, SchedulerConfig(batch_size), BlockManager(10_000, 4), policy, on_step=check)
    assert all(gap <= bound for gap in gaps), (max(gaps), bound)


def service_while_both_wait(name: str, weights: tuple[float, float] = (1.0, 1.0), tenant_cap: str = "") -> dict:
    """Tenant a sends 40 requests at 0 s, b 40 at 1 ms; the weighted tokens each gets while both have requests
    waiting, tallied here from the steps (not from the policy's counters)."""
    requests = [Request(i, (1, 2, 3, 4), 8, 0.0, tenant="a") for i in range(40)]
    requests += [Request(100 + i, (1, 2, 3, 4), 8, 0.001, tenant="b") for i in range(40)]
    ctx = PolicyContext(4, {"a": TenantTargets(weight=weights[0]), "b": TenantTargets(weight=weights[1])})
    served: dict[str, float] = defaultdict(float)

    def tally(scheduler: Scheduler, step) -> None:
        if backlogged(scheduler) != {"a", "b"}:
            return
        for item in step:
            served[item.request.tenant] += W_OUT * item.samples  # a token this step
            if item.request.num_cached == 0 and item.request.preemptions == 0:
                served[item.request.tenant] += W_IN * item.request.prompt_len

    policy = parse_policy(name + tenant_cap).build(ctx)
    drive(requests, SchedulerConfig(4), BlockManager(10_000, 4), policy, on_step=tally)
    return dict(served)


def test_fair_shares_service_equally_where_fcfs_serves_the_first_tenant_only():
    fair, fcfs = service_while_both_wait("fair"), service_while_both_wait("fcfs")
    assert fcfs.get("b", 0.0) == 0.0 and fcfs["a"] > 0  # b waits behind all of a's queue
    assert 0.9 <= fair["a"] / fair["b"] <= 1.1


def test_weights_share_service_in_their_ratio():
    served = service_while_both_wait("fair", weights=(1.0, 3.0))
    assert 2.7 <= served["b"] / served["a"] <= 3.3


def test_a_newly_backlogged_tenant_is_lifted_to_the_smallest_backlogged_counter():
    policy = parse_policy("fair").build(PolicyContext(1))
    scheduler = Scheduler(SchedulerConfig(1), BlockManager(64, 4), policy)
    runner = FakeRunner(scheduler.blocks)
    for i in range(3):
        scheduler.add(Request(i, (1, 2, 3), 2, tenant="a"))
    for _ in range(4):  # a's first two requests run: 2 × (3 prompt + 2 × 2 output) = 14
        step = scheduler.schedule()
        scheduler.postprocess(step, runner.run(step), 0.0)
    assert policy.counters["a"] == 14 and policy.counters["b"] == 0
    scheduler.add(Request(9, (1,), 1, tenant="b"))
    assert policy.counters["b"] == 14 and policy.state()["lifts"] == 1  # not owed a's past service
    scheduler.add(Request(10, (1,), 1, tenant="b"))  # already backlogged: no lift
    assert policy.state()["lifts"] == 1


def test_a_tenant_arriving_at_an_empty_queue_is_lifted_to_the_tenant_that_last_left_it():
    policy = parse_policy("fair").build(PolicyContext(2))
    scheduler = Scheduler(SchedulerConfig(2), BlockManager(64, 4), policy)
    runner = FakeRunner(scheduler.blocks)
    scheduler.add(Request(0, (1, 2, 3, 4, 5), 1, tenant="a"))
    step = scheduler.schedule()  # a leaves the queue with counter 5
    scheduler.postprocess(step, runner.run(step), 0.0)
    scheduler.add(Request(1, (1,), 1, tenant="b"))
    assert policy.counters["b"] == 5


def test_per_tenant_caps_are_respected_and_leave_the_rest_to_other_tenants():
    requests = [Request(i, (1, 2), 6, 0.0, tenant="a") for i in range(12)]
    requests += [Request(100 + i, (1, 2), 6, 0.0, tenant="b") for i in range(3)]
    policy = parse_policy("fair:tenant_cap=2").build(PolicyContext(4))
    peaks: Counter[str] = Counter()

    def check(scheduler: Scheduler, step) -> None:
        per = Counter(r.tenant for r in scheduler.running)
        assert max(per.values()) <= 2
        for tenant, n in per.items():
            peaks[tenant] = max(peaks[tenant], n)

    _, _, log = drive(requests, SchedulerConfig(4), BlockManager(200, 4), policy, on_step=check)
    assert peaks == {"a": 2, "b": 2} and len(log.finished) == 15


def test_when_blocks_run_out_the_tenant_with_the_largest_counter_is_preempted():
    policy = parse_policy("fair").build(PolicyContext(2))
    policy.counters.update({"rich": 100.0, "poor": 1.0})
    rich_old, poor_new = Request(0, (1,), 1, tenant="rich"), Request(1, (1,), 1, tenant="poor")
    assert policy.victim([rich_old, poor_new]) is rich_old  # fcfs would take the newest


@pytest.mark.parametrize(("text", "message"), [
    ("fair:tenant_cap=0", r"tenant_cap must be in \[1, inf\), got 0"),
    ("fair:w_out=0", r"w_out must be in \(0, inf\), got 0.0"),
    ("fair:w_in=-1", r"w_in must be in \(0, inf\)"),
    ("fair:w_in=inf", "w_in must be finite"),
    ("fair:weight=2", "unknown parameter 'weight'; fair takes: tenant_cap"),
])
def test_bad_parameters_name_the_problem(text, message):
    with pytest.raises(ValueError, match=message):
        parse_policy(text)
