"""``seed``: the study's rule, each branch in its order, and what it does to a burst."""

from __future__ import annotations

import pytest
from policy_drive import drive, linear_ms

from batchperf.engine.block_manager import BlockManager
from batchperf.engine.policies import PolicyContext, StepReport, TenantTargets, parse_policy
from batchperf.engine.request import Request
from batchperf.engine.scheduler import SchedulerConfig

CTX = PolicyContext(16, {"": TenantTargets(tpot_ms=50)})


def queue(n: int) -> list[Request]:
    return [Request(i, (1,), 1) for i in range(n)]


def slow(policy, ms: float, steps: int = 4) -> None:
    for _ in range(steps):
        policy.observe(StepReport(0.0, ms / 1e3, (), 0, (), 16, 0, 0))


def test_more_waiting_than_the_threshold_runs_min_of_max_batch_and_everything_pending():
    policy = parse_policy("seed").build(CTX)  # threshold 8, max_batch 16, optimal 4, sla 50 ms
    slow(policy, 500)  # the queue rule comes first: latency does not matter
    assert policy.cap(queue(9), queue(2)) == 11  # 9 waiting + 2 running
    assert policy.cap(queue(20), queue(3)) == 16  # capped at MAX_BATCH
    assert policy.state()["steps_queue"] == 2


def test_latency_over_the_sla_drops_to_batch_one():
    policy = parse_policy("seed").build(CTX)
    slow(policy, 60)
    assert policy.latency_ms == 60 and policy.cap(queue(8), queue(4)) == 1  # 8 waiting is not more than 8
    assert policy.state()["steps_sla"] == 1


def test_otherwise_it_runs_the_optimal_batch():
    policy = parse_policy("seed").build(CTX)
    assert policy.cap(queue(3), []) == 4  # no step measured yet: the SLA is not exceeded
    slow(policy, 50)  # at the SLA is not over it
    assert policy.cap(queue(3), []) == 4
    assert policy.state()["steps_optimal"] == 2


def test_latency_is_the_mean_of_the_last_window_steps():
    policy = parse_policy("seed:window=2,sla_ms=100").build(CTX)
    slow(policy, 300, steps=1)
    slow(policy, 20, steps=2)  # the 300 ms step has left the window
    assert policy.latency_ms == 20 and policy.cap([], []) == 4


def test_parameters_and_defaults():
    assert dict(parse_policy("seed").params) == {"threshold_high": 8, "max_batch": None, "optimal_batch": 4,
                                                 "sla_ms": None, "window": 4}
    small = parse_policy("seed").build(PolicyContext(2, {"": TenantTargets(ttft_ms=300)}))
    assert (small.params["max_batch"], small.params["optimal_batch"], small.params["sla_ms"]) == (2, 2, 150)


@pytest.mark.parametrize(("text", "message"), [
    ("seed:optimal_batch=8,max_batch=4", r"optimal_batch \(8\) must be <= max_batch \(4\)"),
    ("seed:threshold_high=-1", r"threshold_high must be in \[0, inf\)"),
    ("seed:sla_ms=0", r"sla_ms must be in \(0, inf\)"),
    ("seed:sla_ms=nan", "sla_ms must be finite"),
    ("seed:max_batch=0", r"max_batch must be in \[1, inf\)"),
    ("seed:window=two", "window must be an integer, got 'two'"),
    ("seed:batch=4", "unknown parameter 'batch'; seed takes: threshold_high"),
])
def test_bad_parameters_name_the_problem(text, message):
    with pytest.raises(ValueError, match=message):
        parse_policy(text)


def test_a_max_batch_below_the_given_optimal_batch_is_refused_when_built():
    with pytest.raises(ValueError, match=r"optimal_batch \(8\) must be <= max_batch \(4\)"):
        parse_policy("seed:optimal_batch=8").build(PolicyContext(4, CTX.tenants))


def test_without_an_sla_or_a_tpot_ttft_slo_it_says_what_to_give():
    with pytest.raises(ValueError, match=r"seed: no sla_ms .* give seed:sla_ms=\.\.\."):
        parse_policy("seed").build(PolicyContext(4, {"": TenantTargets(e2el_ms=1000)}))


def test_a_burst_runs_big_then_collapses_to_batch_one_while_steps_are_slow():
    """12 requests at once: the queue rule runs them all, and once 8 or fewer wait while a big step's latency is
    still in the window, the rule drops to batch 1 (the study's rule under a burst, measured on the fake clock)."""
    requests = [Request(i, (1, 2, 3), 6, 0.0) for i in range(24)]
    ctx = PolicyContext(8, {"": TenantTargets(tpot_ms=40)})
    policy = parse_policy("seed").build(ctx)
    _, _, log = drive(requests, SchedulerConfig(8), BlockManager(200, 4), policy, step_ms=linear_ms(10, 5))
    # 24 wait: min(8, 32) until 8 or fewer wait; the window's steps of 8 took 50 ms > 40: batch 1 (two steps of
    # 15 ms bring the mean to 32.5), then the optimal 4 (30 ms steps), the other 4 running keep their blocks
    assert log.caps[:10] == [8] * 7 + [1, 1, 4]
    assert log.sizes[7:9] == [1, 1] and log.running[7:9] == [8, 8]
    assert policy.state() | {"policy": "seed"} == {"policy": "seed", "displaced": 0, "steps_queue": 7,
                                                   "steps_sla": 2, "steps_optimal": len(log.caps) - 9}
