"""The client-lag check: the loop-lag timer, the round's verdict at its stated bounds, and a cell's summary."""

from __future__ import annotations

import asyncio
import time

import pytest

from batchperf.measure.client_lag import (
    ABSENT,
    BOUND,
    LOOP_LAG_P99_BOUND_MS,
    REASONS,
    SATURATED,
    LoopLagMonitor,
    check_round,
    problem,
    summarise,
)

SERVER = {"server_mean_ttft_ms": 20.0, "server_mean_e2el_ms": 100.0, "server_requests": 8, ABSENT: {}}
LAG_OK = {"loop_lag_mean_ms": 0.2, "loop_lag_p99_ms": 1.0, "loop_lag_max_ms": 2.0, "loop_lag_samples": 100}


def client(ttft: float = 21.0, e2el: float = 101.0, completed: int = 8) -> dict[str, float]:
    return {"mean_ttft_ms": ttft, "mean_e2el_ms": e2el, "completed": completed}


def check(lag=LAG_OK, server=SERVER, measured=None, duration_s: float = 0.4, slots: int = 2):
    return check_round(lag, server, measured or client(), duration_s=duration_s, slots=slots)


def test_a_blocked_loop_shows_as_lag() -> None:
    loop = asyncio.new_event_loop()
    try:
        monitor = LoopLagMonitor(loop, interval_s=0.001)
        monitor.arm()

        def busy() -> None:
            end = time.perf_counter() + 0.03
            while time.perf_counter() < end:
                pass

        loop.call_later(0.005, busy)
        loop.run_until_complete(asyncio.sleep(0.06))
        monitor.stop()
    finally:
        loop.close()
    summary = monitor.summary()
    assert summary["loop_lag_max_ms"] >= 25  # the timer due during the 30 ms busy loop fired that late
    assert summary["loop_lag_samples"] >= 2 and summary["loop_lag_p99_ms"] <= summary["loop_lag_max_ms"]


def test_no_samples_says_why_and_a_bad_interval_is_refused() -> None:
    loop = asyncio.new_event_loop()
    try:
        assert LoopLagMonitor(loop).summary() == {"loop_lag_samples": 0, ABSENT: {
            "loop_lag": "the loop ran no timer period with work in flight"}}
        with pytest.raises(ValueError, match="interval_s must be > 0"):
            LoopLagMonitor(loop, 0)
    finally:
        loop.close()


def test_an_on_time_client_is_not_bound_and_the_differences_are_recorded() -> None:
    out = check()
    assert out[BOUND] is False and out[REASONS] == []
    assert out["client_mean_ttft_ms"] == 21.0 and out["ttft_client_excess_ms"] == pytest.approx(1.0)
    assert out["e2el_client_excess_ms"] == pytest.approx(1.0)
    assert out["server_occupancy"] == pytest.approx(0.1 * 8 / (0.4 * 2)) and out[SATURATED] is True


@pytest.mark.parametrize(("p99", "bound"), [(LOOP_LAG_P99_BOUND_MS, False), (LOOP_LAG_P99_BOUND_MS + 0.01, True)])
def test_the_loop_lag_bound(p99: float, bound: bool) -> None:
    out = check(lag={**LAG_OK, "loop_lag_p99_ms": p99, "loop_lag_max_ms": 9.0})
    assert out[BOUND] is bound
    assert bound == any("event loop lagged: p99" in r for r in out[REASONS])


@pytest.mark.parametrize(("ttft", "bound"), [(20 * 1.1 + 2, False), (20 * 1.1 + 2.01, True)])
def test_the_ttft_bound_is_server_ttft_times_1_10_plus_2_ms(ttft: float, bound: bool) -> None:
    out = check(measured=client(ttft=ttft))
    assert out[BOUND] is bound
    assert bound == any("client mean TTFT" in r and "server mean TTFT 20.00 ms" in r for r in out[REASONS])


def test_a_server_shared_with_another_client_gives_no_server_figures() -> None:
    out = check(measured=client(completed=6))
    assert "server_mean_ttft_ms" not in out and "ttft_client_excess_ms" not in out
    assert "another client shares the server" in out[ABSENT]["server_mean_ttft_ms"]
    assert out[BOUND] is False  # the loop lag alone decides, and it was fine


def test_without_either_witness_the_round_cannot_be_cleared() -> None:
    out = check(lag={"loop_lag_samples": 0, ABSENT: {"loop_lag": "none"}}, server={ABSENT: {"x": "no /metrics"}})
    assert out[BOUND] is True and out[REASONS] == ["cannot tell: neither the loop lag nor the server's TTFT "
                                                   "was measured"]


def test_an_underfed_server_is_not_saturated_and_a_negative_difference_is_not_stored() -> None:
    out = check(duration_s=4.0, measured=client(ttft=19.0))
    assert out["server_occupancy"] == pytest.approx(0.1) and out[SATURATED] is False
    assert "ttft_client_excess_ms" not in out and "clocks disagree" in out[ABSENT]["ttft_client_excess_ms"]


def test_a_cell_is_bound_when_any_round_was_and_names_it() -> None:
    fine, lagged = check(), check(lag={**LAG_OK, "loop_lag_p99_ms": 30.0, "loop_lag_max_ms": 50.0})
    cell = summarise([fine, lagged, fine])
    assert cell[BOUND] is True and cell[SATURATED] is True
    assert cell[REASONS] and all(r.startswith("round 2 of 3: ") for r in cell[REASONS])
    assert cell["loop_lag_p99_ms"] == 30.0  # the worst round's tail, the median of the rest
    assert cell["loop_lag_mean_ms"] == pytest.approx(0.2)
    assert summarise([fine, fine])[BOUND] is False and summarise([]) == {}
    assert problem(cell) is None


def test_a_bad_section_is_named() -> None:
    assert problem([]) == "is a list, not a mapping"
    assert problem({BOUND: "yes"}) == "client_bound is 'yes', not true or false"
    assert problem({REASONS: "slow"}) == "reasons must be a list of text"
