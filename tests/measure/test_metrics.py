"""Metrics against hand-computed traces (vllm bench serve definitions)."""

import math

import pytest

from batchperf.measure.metrics import SLO, compute_metrics, token_count_errors
from batchperf.measure.trace import RequestTrace, RunTrace


def req(i: int, arrival: float, times: tuple[float, ...], prompt: int = 10, target: int | None = None,
        error: str | None = None) -> RequestTrace:
    return RequestTrace(i, prompt, len(times) if target is None else target, arrival, arrival, times, error=error)


def run(*requests: RequestTrace, end: float | None = None) -> RunTrace:
    end = end if end is not None else max(r.token_times[-1] for r in requests if r.token_times)
    return RunTrace("fake", 1, 1, list(requests), end=end)


def test_two_requests_by_hand() -> None:
    # A: sent 0.0, tokens at 0.1 0.2 0.4 -> ttft 100, e2el 400, tpot (400-100)/2 = 150, itl 100, 200
    # B: sent 0.2, tokens at 0.5 0.6    -> ttft 300, e2el 400, tpot 100,             itl 100
    m = compute_metrics(run(req(0, 0.0, (0.1, 0.2, 0.4), prompt=10), req(1, 0.2, (0.5, 0.6), prompt=20), end=0.6))
    assert m["duration"] == pytest.approx(0.6)
    assert m["completed"] == 2 and m["failed"] == 0
    assert m["total_input_tokens"] == 30 and m["total_output_tokens"] == 5
    assert m["request_throughput"] == pytest.approx(2 / 0.6)
    assert m["output_throughput"] == pytest.approx(5 / 0.6)
    assert m["total_token_throughput"] == pytest.approx(35 / 0.6)
    assert m["mean_ttft_ms"] == pytest.approx(200)
    assert m["median_ttft_ms"] == pytest.approx(200)
    assert m["std_ttft_ms"] == pytest.approx(100)  # population std
    assert m["p99_ttft_ms"] == pytest.approx(100 + 0.99 * 200)  # linear interpolation
    assert m["mean_tpot_ms"] == pytest.approx(125)
    assert m["p90_tpot_ms"] == pytest.approx(100 + 0.9 * 50)
    assert m["mean_itl_ms"] == pytest.approx(400 / 3)  # pooled: 100, 200, 100
    assert m["median_itl_ms"] == pytest.approx(100)
    assert m["p50_itl_ms"] == pytest.approx(100)
    assert m["mean_e2el_ms"] == pytest.approx(400)
    assert (m["n_ttft"], m["n_tpot"], m["n_itl"], m["n_e2el"]) == (2, 2, 3, 2)


def test_single_request_single_token_has_no_tpot_or_itl() -> None:
    m = compute_metrics(run(req(0, 0.0, (0.25,))))
    assert m["completed"] == 1
    assert m["mean_ttft_ms"] == pytest.approx(250) and m["p99_e2el_ms"] == pytest.approx(250)
    assert m["n_tpot"] == 0 and m["mean_tpot_ms"] == 0.0  # vLLM reports 0 with no samples
    assert m["n_itl"] == 0 and m["p99_itl_ms"] == 0.0


def test_n_equal_two_tpot_is_the_single_gap() -> None:
    m = compute_metrics(run(req(0, 0.0, (0.1, 0.35))))
    assert m["mean_tpot_ms"] == pytest.approx(250) and m["mean_itl_ms"] == pytest.approx(250)


def test_failed_requests_are_not_completed_and_not_timed() -> None:
    m = compute_metrics(run(req(0, 0.0, (0.1, 0.2)), req(1, 0.0, (0.3,), error="oom"), end=0.3))
    assert m["completed"] == 1 and m["failed"] == 1
    assert m["total_output_tokens"] == 2
    assert m["p99_ttft_ms"] == pytest.approx(100)


def test_goodput_counts_requests_meeting_every_slo() -> None:
    trace = run(req(0, 0.0, (0.1, 0.2, 0.4)), req(1, 0.2, (0.5, 0.6)), end=0.6)
    assert compute_metrics(trace, SLO(ttft_ms=150))["request_goodput"] == pytest.approx(1 / 0.6)
    assert compute_metrics(trace, SLO(tpot_ms=120))["request_goodput"] == pytest.approx(1 / 0.6)
    assert compute_metrics(trace, SLO(e2el_ms=400))["request_goodput"] == pytest.approx(2 / 0.6)
    assert "request_goodput" not in compute_metrics(trace)


def test_zero_duration_is_an_error() -> None:
    with pytest.raises(ValueError, match="duration"):
        compute_metrics(RunTrace("fake", 1, 1, [], end=0.0))


def test_token_count_check_names_each_short_request() -> None:
    trace = run(req(0, 0.0, (0.1, 0.2), target=2), req(1, 0.0, (0.1,), target=3))
    assert token_count_errors(trace) == ["request 1: generated 1 tokens, target 3"]


def test_every_vllm_field_is_present_and_finite() -> None:
    m = compute_metrics(run(req(0, 0.0, (0.1, 0.2))))
    for family in ("ttft", "tpot", "itl", "e2el"):
        for stat in ("mean", "median", "std", "p50", "p90", "p99"):
            assert math.isfinite(m[f"{stat}_{family}_ms"])


def test_trace_round_trips_through_dict() -> None:
    trace = run(req(0, 0.0, (0.1, 0.2)))
    assert RunTrace.from_dict(trace.to_dict()) == trace
    with pytest.raises(ValueError, match="run trace"):
        RunTrace.from_dict({"backend": "x"})


def test_a_chunk_of_several_tokens_is_one_itl_sample_and_tpot_still_counts_tokens() -> None:
    # a server at --stream-interval 4: tokens 1 | 2-5 | 6-8, arriving at 0.1, 0.3, 0.45
    times = (0.1, 0.3, 0.3, 0.3, 0.3, 0.45, 0.45, 0.45)
    m = compute_metrics(run(RequestTrace(0, 10, 8, 0.0, 0.0, times, sent=0.0, chunk_sizes=(1, 4, 3))))
    assert m["n_itl"] == 2 and m["mean_itl_ms"] == pytest.approx(175)  # gaps 200 and 150, no zero gaps
    assert m["median_itl_ms"] == pytest.approx(175)
    assert m["mean_tpot_ms"] == pytest.approx(350 / 7)  # (E2E - TTFT) / (tokens - 1)
    assert m["total_output_tokens"] == 8


def test_ttft_and_e2el_count_from_the_send_and_the_send_delay_is_its_own_figure() -> None:
    trace = run(RequestTrace(0, 10, 2, 0.5, 0.6, (0.9, 1.0), sent=0.502, chunk_sizes=(1, 1)))
    m = compute_metrics(trace)
    assert m["mean_ttft_ms"] == pytest.approx(398) and m["mean_e2el_ms"] == pytest.approx(498)
    assert m["mean_send_delay_ms"] == pytest.approx(2) and m["n_send_delay"] == 1


def test_a_trace_written_before_sends_and_chunks_were_recorded_reads_as_before() -> None:
    old = {"backend": "x", "batch_size": 1, "concurrency": 1, "end": 0.4,
           "requests": [{"request_id": 0, "prompt_len": 4, "target_len": 3, "arrival": 0.1, "scheduled": 0.1,
                         "token_times": [0.2, 0.3, 0.4], "kv_tokens": None, "kv_bytes": None, "error": None}]}
    trace = RunTrace.from_dict(old)
    m = compute_metrics(trace)
    assert m["mean_ttft_ms"] == pytest.approx(100) and m["n_itl"] == 2 and m["mean_send_delay_ms"] == 0


def test_chunks_round_trip_and_must_add_up_to_the_tokens() -> None:
    trace = run(RequestTrace(0, 10, 3, 0.0, 0.0, (0.1, 0.2, 0.2), sent=0.01, chunk_sizes=(1, 2)))
    assert RunTrace.from_dict(trace.to_dict()) == trace
    with pytest.raises(ValueError, match=r"request 0: chunk_sizes \[1, 1\] must be >= 1 each and sum to its 3"):
        RequestTrace(0, 10, 3, 0.0, 0.0, (0.1, 0.2, 0.3), chunk_sizes=(1, 1))
