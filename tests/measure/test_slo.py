"""SLO attainment, goodput, per-tenant metrics and fairness against hand-built traces, and their invariants."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from batchperf.measure.metrics import SLO, compute_metrics
from batchperf.measure.slo import (
    W_IN,
    W_OUT,
    attainment,
    backlogged,
    jain,
    jain_fairness,
    max_service_gap,
    meets,
    service,
    slo_summary,
    summarise_tenants,
    tenant_metrics,
)
from batchperf.measure.trace import RequestTrace, RunTrace


def req(i: int, sent: float, times: tuple[float, ...], tenant: str | None = None, prompt: int = 10,
        target: int | None = None, error: str | None = None) -> RequestTrace:
    return RequestTrace(i, prompt, len(times) if target is None else target, sent, sent, times, error=error,
                        tenant=tenant)


def run(*requests: RequestTrace, end: float | None = None) -> RunTrace:
    end = end if end is not None else max(t for r in requests for t in r.token_times)
    return RunTrace("fake", 1, 1, list(requests), end=end)


# --- attainment and goodput -------------------------------------------------------------------------------------


def test_attainment_counts_each_miss_over_requests_offered() -> None:
    # a: ttft 100 ms (met), b: ttft 300 ms (missed), c: errored, d: cut off (2 of 4 tokens), e: never returned
    trace = run(req(0, 0.0, (0.1, 0.2)), req(1, 0.0, (0.3, 0.4)), req(2, 0.0, (), error="boom"),
                req(3, 0.0, (0.1, 0.2), target=4), end=1.0)
    got = attainment(trace, {"": SLO(ttft_ms=200)}, offered={"": 5})
    assert (got.offered, got.met) == (5, 1)
    assert got.ratio == pytest.approx(0.2)
    assert got.goodput == pytest.approx(1.0)  # 1 request met in 1 s


def test_without_an_slo_completing_in_full_is_meeting() -> None:
    trace = run(req(0, 0.0, (0.1, 0.2)), req(1, 0.0, (0.1,), target=2), end=0.5)
    assert attainment(trace, {}).met == 1
    assert meets(trace.requests[0], None) and not meets(trace.requests[1], None)


def test_a_value_at_the_bound_meets_it_as_vllm_goodput() -> None:
    assert meets(req(0, 0.0, (0.2, 0.3)), SLO(ttft_ms=200))


def test_each_tenant_is_held_to_its_own_slo() -> None:
    trace = run(req(0, 0.0, (0.3, 0.4), tenant="chat"), req(1, 0.0, (0.3, 0.4), tenant="batch"), end=1.0)
    slos = {"chat": SLO(ttft_ms=200), "batch": SLO(e2el_ms=5000)}
    assert attainment(trace, slos, tenant="chat").met == 0
    assert attainment(trace, slos, tenant="batch").met == 1
    assert attainment(trace, slos).ratio == pytest.approx(0.5)


def test_shedding_load_never_raises_the_score() -> None:
    """Dropping the slow request from the trace (a backend that refuses it) still counts it offered."""
    full = run(req(0, 0.0, (0.1, 0.2)), req(1, 0.0, (0.5, 0.6)), end=1.0)
    shed = run(req(0, 0.0, (0.1, 0.2)), end=1.0)
    slos = {"": SLO(ttft_ms=200)}
    assert attainment(shed, slos, offered={"": 2}).ratio == attainment(full, slos).ratio == 0.5


def test_a_zero_duration_is_refused() -> None:
    with pytest.raises(ValueError, match="duration must be > 0"):
        attainment(RunTrace("fake", 1, 1, [], end=0.0), {})


@st.composite
def traces(draw: st.DrawFn) -> RunTrace:
    n = draw(st.integers(1, 8))
    requests = []
    for i in range(n):
        sent = draw(st.floats(0, 1))
        gaps = draw(st.lists(st.floats(0.001, 0.5), min_size=1, max_size=5))
        times = tuple(sent + sum(gaps[:k + 1]) for k in range(len(gaps)))
        requests.append(req(i, sent, times, tenant=draw(st.sampled_from(["a", "b", "c"])),
                            prompt=draw(st.integers(1, 50))))
    return run(*requests, end=max(r.token_times[-1] for r in requests) + 0.01)


@given(traces(), st.floats(1, 2000), st.floats(0, 2000))
def test_attainment_is_monotone_in_slo_looseness(trace: RunTrace, ttft_ms: float, extra: float) -> None:
    tight, loose = SLO(ttft_ms=ttft_ms, e2el_ms=ttft_ms * 2), SLO(ttft_ms=ttft_ms + extra, e2el_ms=(ttft_ms + extra) * 2)
    for tenant in (None, "a"):
        assert (attainment(trace, {t: tight for t in "abc"}, tenant=tenant).ratio
                <= attainment(trace, {t: loose for t in "abc"}, tenant=tenant).ratio)
    assert 0 <= attainment(trace, {t: tight for t in "abc"}).ratio <= 1


# --- per-tenant vLLM metrics ---------------------------------------------------------------------------------------


def test_tenant_metrics_are_compute_metrics_over_the_tenants_requests() -> None:
    a0, a1, b0 = req(0, 0.0, (0.1, 0.2), tenant="a"), req(1, 0.0, (0.3, 0.5), tenant="a"), req(2, 0.0, (0.9, 1.0),
                                                                                                tenant="b")
    trace = run(a0, a1, b0)
    only_a = compute_metrics(run(a0, a1, end=trace.end))
    got = tenant_metrics(trace, "a")
    assert got["p99_ttft_ms"] == pytest.approx(only_a["p99_ttft_ms"]) == pytest.approx(100 + 0.99 * 200)
    assert got["mean_e2el_ms"] == pytest.approx(350)
    assert got["n_ttft"] == 2 and tenant_metrics(trace, "b")["mean_ttft_ms"] == pytest.approx(900)


# --- service and fairness -----------------------------------------------------------------------------------------


def test_service_is_vtc_weighted_tokens() -> None:
    trace = run(req(0, 0.0, (0.1, 0.2, 0.3), tenant="a", prompt=10), req(1, 0.0, (0.5,), tenant="b", prompt=4))
    assert service(trace) == {"a": W_IN * 10 + W_OUT * 3, "b": W_IN * 4 + W_OUT * 1}


def test_backlogged_intervals_merge_overlapping_requests() -> None:
    trace = run(req(0, 0.0, (0.1, 0.4), tenant="a"), req(1, 0.3, (0.6,), tenant="a"), req(2, 1.0, (1.2,), tenant="a"))
    assert backlogged(trace) == {"a": [(0.0, 0.6), (1.0, 1.2)]}


@given(st.lists(st.floats(0, 1e6), min_size=1, max_size=20))
@example([1e-159, 1e-159])  # squared, these underflow into subnormals: the unscaled index came out 1.0000012
def test_jain_lies_in_one_over_n_to_one(values: list[float]) -> None:
    assert 1 / len(values) - 1e-9 <= jain(values) <= 1 + 1e-9


@given(st.floats(1e-3, 1e6), st.integers(1, 20))
def test_jain_of_equal_service_is_one(value: float, n: int) -> None:
    assert jain([value] * n) == pytest.approx(1.0)


def test_jain_by_hand() -> None:
    assert jain([1.0, 0.0]) == pytest.approx(0.5)
    assert jain([1.0, 3.0]) == pytest.approx(16 / 20)
    with pytest.raises(ValueError, match=">= 0"):
        jain([-1.0])


def test_two_tenants_served_alike_are_fair_and_one_starved_is_not() -> None:
    alike = run(req(0, 0.0, (0.5, 1.0), tenant="a"), req(1, 0.0, (0.5, 1.0), tenant="b"))
    assert jain_fairness(alike) == pytest.approx(1.0) and max_service_gap(alike) == 0.0
    # b waits while a is served: a gets 10 + 2x4 = 18 tokens in [0, 0.4], b nothing until 0.9
    starved = run(req(0, 0.0, (0.1, 0.2, 0.3, 0.4), tenant="a"), req(1, 0.0, (0.9, 1.0), tenant="b"))
    assert jain_fairness(starved) < 1
    # both backlogged over [0, 0.4]: D rises to 18; over [0, 1.0], b catches up to 14 (D = 4): max D - min D = 18
    assert max_service_gap(starved) == pytest.approx(W_IN * 10 + W_OUT * 4)


def test_service_gap_counts_only_intervals_where_both_were_backlogged() -> None:
    # a is served in [0, 0.5] while b has not arrived; then b alone: never backlogged together
    trace = run(req(0, 0.0, (0.1, 0.5), tenant="a"), req(1, 0.6, (0.7, 0.8), tenant="b"))
    assert max_service_gap(trace) == 0.0


def test_one_tenant_is_trivially_fair() -> None:
    trace = run(req(0, 0.0, (0.1, 0.2)), req(1, 0.0, (0.3,)))
    assert jain_fairness(trace) == 1.0 and max_service_gap(trace) == 0.0


# --- the cell's sections ------------------------------------------------------------------------------------------


def test_slo_summary_has_overall_and_per_tenant_sections() -> None:
    trace = run(req(0, 0.0, (0.1, 0.2), tenant="chat"), req(1, 0.0, (0.9, 1.0), tenant="chat"),
                req(2, 0.0, (0.5, 2.0), tenant="batch"), end=2.0)
    section, per_tenant = slo_summary(trace, {"chat": SLO(ttft_ms=200), "batch": SLO(e2el_ms=10_000)},
                                      offered={"chat": 2, "batch": 2})
    assert section["attainment"] == pytest.approx(2 / 4) and section["offered"] == 4
    assert section["request_goodput"] == pytest.approx(2 / 2.0) and section["tenant_count"] == 2
    assert per_tenant["chat"]["attainment"] == pytest.approx(0.5)
    assert per_tenant["batch"]["attainment"] == pytest.approx(0.5)  # 1 met of 2 offered (one never returned)
    assert per_tenant["batch"]["p99_e2el_ms"] == pytest.approx(2000)
    assert 0.5 <= section["jain_fairness"] <= 1


def test_a_tenant_that_offered_but_never_returned_is_all_miss() -> None:
    trace = run(req(0, 0.0, (0.1,), tenant="a"), end=1.0)
    _, per_tenant = slo_summary(trace, {}, offered={"a": 1, "b": 3})
    assert per_tenant["b"] == {"attainment": 0.0, "request_goodput": 0.0, "offered": 3, "met": 0,
                               "service_tokens": 0.0, "longest_unserved_s": 0.0, "starved": 0}


def test_summarise_tenants_takes_the_median_over_rounds() -> None:
    rounds = [{"a": {"attainment": x, "n_ttft": 3}} for x in (0.5, 0.9, 0.7)]
    assert summarise_tenants(rounds) == {"a": {"attainment": 0.7, "n_ttft": 3}}


def brute_force_gap(trace: RunTrace) -> float:
    """Every pair of instants in every interval two tenants were both backlogged, W summed directly."""
    from batchperf.measure.slo import service_events, tenant_of

    def served(tenant: str, t: float) -> float:
        return sum(w for r in trace.requests if tenant_of(r) == tenant for at, w in service_events(r) if at <= t)

    spans, worst = backlogged(trace), 0.0
    names = sorted(spans)
    for i, f in enumerate(names):
        for g in names[i + 1:]:
            for a0, a1 in spans[f]:
                for b0, b1 in spans[g]:
                    lo, hi = max(a0, b0), min(a1, b1)
                    if lo >= hi:
                        continue
                    points = [lo] + [at for r in trace.requests for at, _ in service_events(r) if lo < at <= hi]
                    d = [served(f, t) - served(g, t) for t in points]
                    worst = max(worst, max(abs(x - y) for x in d for y in d))
    return worst


@given(traces())
@settings(max_examples=60, deadline=None)
def test_the_service_gap_matches_a_brute_force(trace: RunTrace) -> None:
    assert max_service_gap(trace) == pytest.approx(brute_force_gap(trace))


def pairwise_gap(trace: RunTrace) -> float:
    """The definition max_service_gap had before issue 59, kept as the reference: every pair of tenants, each pair
    walking both tenants' whole service (quadratic in the tenants)."""
    import itertools

    import numpy as np

    from batchperf.measure.slo import service_events, tenant_of

    def intersect(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> list[tuple[float, float]]:
        out, i, j = [], 0, 0
        while i < len(a) and j < len(b):
            lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
            if lo < hi:
                out.append((lo, hi))
            if a[i][1] < b[j][1]:
                i += 1
            else:
                j += 1
        return out

    events: dict[str, list[tuple[float, float]]] = {t: [] for t in {tenant_of(r) for r in trace.requests}}
    for r in trace.requests:
        events[tenant_of(r)] += service_events(r)
    spans = backlogged(trace)
    worst = 0.0
    for f, g in itertools.combinations(sorted(events), 2):
        steps: dict[float, float] = {}
        for t, w in [*events[f], *((t, -w) for t, w in events[g])]:
            steps[t] = steps.get(t, 0.0) + w
        times = np.array(sorted(steps))
        level = np.concatenate(([0.0], np.cumsum([steps[t] for t in times])))
        for lo, hi in intersect(spans[f], spans[g]):
            first, last = np.searchsorted(times, lo, side="right"), np.searchsorted(times, hi, side="right")
            inside = level[first:last + 1]
            worst = max(worst, float(inside.max() - inside.min()))
    return worst


@st.composite
def many_tenant_traces(draw: st.DrawFn) -> RunTrace:
    """Up to 40 requests of up to 12 tenants, on a coarse clock so that requests start, end and are served at the
    same instants (ties between tenants, and intervals that touch)."""
    requests = []
    for i in range(draw(st.integers(1, 40))):
        sent = draw(st.integers(0, 20)) / 10
        gaps = draw(st.lists(st.integers(0, 5), min_size=1, max_size=4))
        times = tuple(sent + sum(gaps[:k + 1]) / 10 for k in range(len(gaps)))
        requests.append(req(i, sent, times, tenant=f"t{draw(st.integers(0, 11))}", prompt=draw(st.integers(1, 50))))
    return run(*requests, end=max(r.token_times[-1] for r in requests) + 0.1)


@given(st.one_of(traces(), many_tenant_traces()))
@settings(max_examples=300, deadline=None)
def test_the_service_gap_is_the_pairwise_definitions_exactly(trace: RunTrace) -> None:
    # issue 59: the gap now sweeps the intervals tenants shared instead of walking every pair of tenants
    assert max_service_gap(trace) == pairwise_gap(trace)


def test_the_service_gap_visits_only_tenants_backlogged_together() -> None:
    """500 tenants one after another (each alone while it waits): no pair shares an interval, so the sweep meets
    none, where the pairwise walk took 124,750 pairs."""
    from batchperf.measure.slo import _shared_spans

    trace = run(*(req(i, float(i), (i + 0.5,), tenant=f"t{i}") for i in range(500)), end=501.0)
    assert list(_shared_spans(backlogged(trace))) == [] and max_service_gap(trace) == 0.0
    both = run(req(0, 0.0, (0.5, 1.0), tenant="a"), req(1, 0.2, (0.8,), tenant="b"), end=2.0)
    assert list(_shared_spans(backlogged(both))) == [("b", "a", 0.2, 0.8)]
