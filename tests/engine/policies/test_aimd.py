"""``aimd``: additive increase while the window meets the target and the cap is pressed, multiplicative decrease
when it misses, always within [min_cap, max_cap]; it never reads the offered load."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from policy_drive import drive, linear_ms

from batchperf.engine.block_manager import BlockManager
from batchperf.engine.policies import PolicyContext, StepReport, TenantTargets, parse_policy
from batchperf.engine.request import Request
from batchperf.engine.scheduler import SchedulerConfig

CTX = PolicyContext(16, {"chat": TenantTargets(tpot_ms=50), "batch": TenantTargets(tpot_ms=200)})


def feed(policy, ms: float, steps: int, pressed: bool = True) -> None:
    """``steps`` steps of ``ms`` each; ``pressed``: requests waited with the running set at the cap."""
    for _ in range(steps):
        cap = policy.cap([], [])
        policy.observe(StepReport(0.0, ms / 1e3, (), 0, (), cap, cap, 1 if pressed else 0))


def test_it_starts_at_the_cells_batch_size_the_kv_pool_was_sized_for():
    assert parse_policy("aimd").build(CTX).cap([], []) == 16
    assert parse_policy("aimd:max_cap=8").build(CTX).cap([], []) == 8


def test_from_a_lower_start_it_grows_by_step_per_window_that_met_the_tightest_tpot():
    policy = parse_policy("aimd:step=2,slow_start=0,start=1").build(CTX)
    assert policy.params["target_ms"] == 50 and policy.cap([], []) == 1
    feed(policy, 50, steps=3)
    assert policy.cap([], []) == 1  # a window is 4 steps
    feed(policy, 50, steps=1)
    assert policy.cap([], []) == 3
    feed(policy, 10, steps=8)
    assert policy.cap([], []) == 7 and policy.state()["increases"] == 3


def test_slow_start_doubles_the_cap_until_the_first_miss_then_grows_by_step():
    policy = parse_policy("aimd:start=1").build(CTX)
    caps = []
    for _ in range(5):
        feed(policy, 10, steps=4)
        caps.append(policy.cap([], []))
    assert caps == [2, 4, 8, 16, 16]  # 4 windows to the max cap, not 15
    feed(policy, 60, steps=4)  # a miss: cut by 10%, and from then on additive
    assert policy.cap([], []) == 14
    feed(policy, 10, steps=8)
    assert policy.cap([], []) == 16 and policy.state()["decreases"] == 1
    feed(policy, 60, steps=4)
    feed(policy, 10, steps=4)
    assert policy.cap([], []) == 15  # +1 after the cut to 14, not doubled


def test_a_cap_nobody_pressed_against_does_not_grow():
    policy = parse_policy("aimd:start=1").build(CTX)
    feed(policy, 10, steps=40, pressed=False)
    assert policy.cap([], []) == 1 and policy.state()["increases"] == 0


def test_a_window_that_missed_the_target_cuts_the_cap_by_the_factor():
    policy = parse_policy("aimd:start=10,decrease=0.5").build(CTX)
    feed(policy, 60, steps=4)
    assert policy.cap([], []) == 5
    feed(policy, 60, steps=4)
    assert policy.cap([], []) == 2  # floor(2.5)
    feed(policy, 60, steps=8)
    assert policy.cap([], []) == 1  # never below min_cap
    state = policy.state()
    assert (state["cap_final"], state["cap_min"], state["cap_max"], state["decreases"]) == (1, 1, 10, 3)


def test_the_default_decrease_is_clippers_ten_percent_and_always_lowers_a_cap_above_min_cap():
    policy = parse_policy("aimd:start=16").build(CTX)
    caps = []
    for _ in range(6):
        feed(policy, 80, steps=4)
        caps.append(policy.cap([], []))
    assert caps == [14, 12, 10, 9, 8, 7]


@settings(max_examples=50, deadline=None)
@given(windows=st.lists(st.tuples(st.floats(1, 200), st.booleans()), max_size=60),
       low=st.integers(1, 4), high=st.integers(4, 16), step=st.integers(1, 5),
       decrease=st.floats(0.05, 0.95))
def test_the_cap_stays_within_its_bounds_and_moves_the_way_the_latency_says(windows, low, high, step, decrease):
    policy = parse_policy(f"aimd:min_cap={low},max_cap={high},step={step},decrease={decrease!r}").build(CTX)
    for ms, pressed in windows:
        slow = not policy.state()["decreases"]  # slow start: doubled until the first cut
        before = policy.cap([], [])
        feed(policy, ms, steps=4, pressed=pressed)
        after = policy.cap([], [])
        assert low <= after <= high
        if ms > 50:
            assert after == max(low, int(before * decrease))
        elif pressed:
            assert after == min(high, before * 2 if slow else before + step)
        else:
            assert after == before


def test_without_target_ms_or_a_tpot_ttft_slo_it_says_what_to_give():
    with pytest.raises(ValueError, match=r"aimd: no target_ms .* give aimd:target_ms=\.\.\."):
        parse_policy("aimd").build(PolicyContext(8))
    assert parse_policy("aimd:target_ms=25").build(PolicyContext(8)).params["target_ms"] == 25


@pytest.mark.parametrize(("text", "message"), [
    ("aimd:decrease=1", r"decrease must be in \(0, 1\), got 1.0"),
    ("aimd:decrease=0", r"decrease must be in \(0, 1\), got 0.0"),
    ("aimd:decrease=inf", "decrease must be finite"),
    ("aimd:min_cap=-2", r"min_cap must be in \[1, inf\), got -2"),
    ("aimd:max_cap=0", r"max_cap must be in \[1, inf\), got 0"),
    ("aimd:min_cap=5,max_cap=2", r"min_cap \(5\) must be <= max_cap \(2\)"),
    ("aimd:start=9,max_cap=4", r"start \(9\) must lie in \[min_cap, max_cap\]"),
    ("aimd:step=1.5", "step must be an integer, got '1.5'"),
    ("aimd:target_ms=-1", r"target_ms must be in \(0, inf\)"),
    ("aimd:step=1,step=2", "step is given twice"),
])
def test_bad_parameters_name_the_bound(text, message):
    with pytest.raises(ValueError, match=message):
        parse_policy(text)


def test_a_min_cap_above_the_cells_batch_size_is_refused_when_built():
    with pytest.raises(ValueError, match=r"min_cap \(8\) must be <= max_cap \(4\)"):
        parse_policy("aimd:min_cap=8").build(PolicyContext(4, CTX.tenants))


def test_the_normalised_text_and_label():
    spec = parse_policy("aimd: step = 1 , decrease=.7")
    assert (spec.text, spec.label, spec.is_default) == ("aimd:decrease=0.7,step=1", "aimd-decrease0.7-step1", False)
    assert spec.params["decrease"] == 0.7 and spec.params["max_cap"] is None


def test_in_the_engine_the_cap_settles_where_steps_meet_the_target_without_knowing_the_load():
    """Steps cost 12 ms + 5 ms per request and the target is 50 ms: 7 requests per step meet it (47 ms), 8 do not
    (52 ms). Under a backlog of 60 requests aimd climbs from 1, one per window of 4 steps (slow start off), then
    probes 8, misses, and is cut back to floor(8 * 0.9) = 7, window after window, until the backlog drains; with
    slow start it doubles 1, 2, 4, 8, misses at 8 and settles the same way."""
    requests = [Request(i, (1, 2), 12, 0.0) for i in range(60)]
    policy = parse_policy("aimd:slow_start=0,start=1").build(CTX)
    _, _, log = drive(requests, SchedulerConfig(16), BlockManager(400, 4), policy, step_ms=linear_ms(12, 5))
    climb = [cap for cap in range(1, 8) for _ in range(4)]
    assert log.caps[:28] == climb
    assert log.caps[28:52] == ([8] * 4 + [7] * 4) * 3
    assert max(log.sizes) == 8 and policy.state()["cap_max"] == 8 and policy.state()["decreases"] >= 3
    requests = [Request(i, (1, 2), 12, 0.0) for i in range(60)]
    policy = parse_policy("aimd:start=1").build(CTX)
    _, _, log = drive(requests, SchedulerConfig(16), BlockManager(400, 4), policy, step_ms=linear_ms(12, 5))
    assert log.caps[:20] == [1] * 4 + [2] * 4 + [4] * 4 + [8] * 4 + [7] * 4
    assert log.caps[20:36] == ([8] * 4 + [7] * 4) * 2 and policy.state()["cap_max"] == 8
    # by default from the cell's batch size (16): cut window after window (16, 14, 12, 10, 9, 8, 7), then the same
    requests = [Request(i, (1, 2), 12, 0.0) for i in range(60)]
    policy = parse_policy("aimd").build(CTX)
    _, _, log = drive(requests, SchedulerConfig(16), BlockManager(400, 4), policy, step_ms=linear_ms(12, 5))
    assert log.caps[:4] == [16] * 4 and 7 in log.caps and policy.state()["cap_max"] == 16
