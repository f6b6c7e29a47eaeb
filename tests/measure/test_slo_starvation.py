"""Starvation (issue 27): a tenant backlogged with no token while later arrivals of another tenant were served,
for at least STARVATION_MIN_S and STARVATION_SHARE of the run."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batchperf.measure.slo import STARVATION_MIN_S, longest_unserved, slo_summary, starvation_window, starved
from batchperf.measure.trace import RequestTrace, RunTrace

W = STARVATION_MIN_S


def req(i: int, sent: float, times: tuple[float, ...], tenant: str) -> RequestTrace:
    return RequestTrace(i, 10, len(times), sent, sent, times, tenant=tenant)


def run(*requests: RequestTrace) -> RunTrace:
    return RunTrace("fake", 1, 1, list(requests), end=max(t for r in requests for t in r.token_times))


def steady(tenant: str, until: float, every: float = 0.5, first: float = 0.0) -> list[RequestTrace]:
    """One request of ``tenant`` every ``every`` s from ``first``, each served at once (a token 0.1 s later)."""
    n = int((until - first) / every)
    return [req(100 + i, first + i * every, (first + i * every + 0.1,), tenant) for i in range(n)]


def test_a_tenant_overtaken_by_later_arrivals_for_most_of_the_run_is_starved() -> None:
    """The fake policy (a priority queue that never runs the batch tenant) serves every chat request sent after the
    batch request until W + 2 s: batch is starved, chat is not."""
    trace = run(req(0, 0.0, (W + 2.0, W + 2.1), "batch"), *steady("chat", W + 2.0, first=0.2))
    unserved = longest_unserved(trace)
    assert unserved["batch"] == pytest.approx(W + 2.0) and unserved["chat"] == 0.0
    assert starved(unserved, trace.duration) == ["batch"]
    section, tenants = slo_summary(trace, {}, offered={"batch": 1, "chat": len(trace.requests) - 1})
    assert section["starved_tenants"] == 1
    assert tenants["batch"]["starved"] == 1 and tenants["chat"]["starved"] == 0
    assert tenants["batch"]["longest_unserved_s"] == pytest.approx(W + 2.0)


def test_a_queue_served_in_arrival_order_starves_nobody_however_long() -> None:
    """Chat's requests were all sent before batch's: batch waits W + 2 s behind them, in arrival order: slow, not
    starved."""
    early = [req(100 + i, 0.0, (0.5 * (i + 1),), "chat") for i in range(int((W + 2) / 0.5))]
    trace = run(*early, req(0, 0.1, (W + 2.5,), "batch"))
    assert longest_unserved(trace)["batch"] == 0.0 and starved(longest_unserved(trace), trace.duration) == []


def test_a_slow_engine_serving_nobody_starves_nobody() -> None:
    trace = run(req(0, 0.0, (W + 2.0,), "a"), req(1, 0.0, (W + 2.0,), "b"))
    assert longest_unserved(trace) == {"a": 0.0, "b": 0.0}


def test_one_tenant_alone_is_never_starved() -> None:
    assert starved(longest_unserved(run(req(0, 0.0, (W + 3.0,), "only"))), W + 3.0) == []


def test_a_short_or_small_share_of_the_run_is_not_starvation() -> None:
    """Overtaken for W - 1 s: below the floor. Overtaken for W + 1 s of a 4 W run: under half of it."""
    short = run(req(0, 0.0, (W - 1.0, W - 0.9), "batch"), *steady("chat", W, first=0.2))
    assert longest_unserved(short)["batch"] == pytest.approx(W - 1.0) and starved(longest_unserved(short), 10) == []
    long_run = run(req(0, 0.0, (W + 1.0, 4 * W), "batch"), *steady("chat", W + 1.0, first=0.2))
    assert long_run.duration == pytest.approx(4 * W) and starvation_window(long_run.duration) == pytest.approx(2 * W)
    assert starved(longest_unserved(long_run), long_run.duration) == []


def test_the_window_counts_from_the_last_token_not_the_send() -> None:
    """Served early, then dropped for W + 1.3 s while later chat arrivals are served: starved too."""
    trace = run(req(0, 0.0, (0.2, W + 1.5), "batch"), *steady("chat", W + 1.5, first=0.3))
    assert longest_unserved(trace)["batch"] == pytest.approx(W + 1.3)
    assert starved(longest_unserved(trace), trace.duration) == ["batch"]


@given(st.lists(st.tuples(st.sampled_from("abc"), st.floats(0.01, 3.0), st.integers(1, 4), st.floats(0.01, 2.0)),
                min_size=1, max_size=25))
@settings(max_examples=200, deadline=None)
def test_service_in_arrival_order_overtakes_nobody(draws: list[tuple[str, float, int, float]]) -> None:
    """One request at a time in the order sent, however slow: no tenant is ever overtaken (so never starved)."""
    sent, now, requests = 0.0, 0.0, []
    for i, (tenant, gap, tokens, step) in enumerate(draws):
        sent += gap
        now = max(now, sent)
        times = tuple(now + step * (k + 1) for k in range(tokens))
        now = times[-1]
        requests.append(req(i, sent, times, tenant))
    trace = run(*requests)
    assert all(v == 0.0 for v in longest_unserved(trace).values())
