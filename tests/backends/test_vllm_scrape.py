"""A server's own mean latencies over a run, from its /metrics histograms before and after it."""

from __future__ import annotations

import pytest

from batchperf.backends.vllm_scrape import ScrapeError, server_latencies


def histograms(n: int, ttft_s: float, e2e_s: float, with_queue: bool = True) -> str:
    """vLLM's latency histograms after ``n`` requests (cut to _sum and _count; the buckets are not read)."""
    families = {"time_to_first_token": ttft_s, "e2e_request_latency": e2e_s, "request_time_per_output_token": 0.01}
    if with_queue:
        families["request_queue_time"] = 0.002
    lines = []
    for name, each in families.items():
        lines += [f"# TYPE vllm:{name}_seconds histogram",
                  f'vllm:{name}_seconds_bucket{{le="+Inf",engine="0"}} {n}',
                  f'vllm:{name}_seconds_sum{{engine="0"}} {n * each}',
                  f'vllm:{name}_seconds_count{{engine="0"}} {n}']
    return "\n".join(lines) + "\n"


def test_the_run_s_means_are_the_difference_of_sum_over_the_difference_of_count() -> None:
    before, after = histograms(10, 0.5, 2.0), histograms(18, 0.5, 2.0)
    out = server_latencies("u", before, after.replace('first_token_seconds_sum{engine="0"} 9.0',
                                                      'first_token_seconds_sum{engine="0"} 5.8'))
    # 8 requests: TTFT sum 5.8 - 5.0 = 0.8 s, so 100 ms each; E2E (36 - 20) / 8 = 2 s
    assert out["server_mean_ttft_ms"] == pytest.approx(100.0) and out["server_mean_e2el_ms"] == 2000.0
    assert out["server_requests"] == 8 and out["server_mean_queue_ms"] == pytest.approx(2.0) and out["absent"] == {}


def test_what_the_server_does_not_give_is_absent_with_the_reason() -> None:
    out = server_latencies("u", histograms(3, 0.1, 1.0, with_queue=False), histograms(3, 0.1, 1.0, with_queue=False))
    assert out["absent"]["server_mean_queue_ms"] == "u has no vllm:request_queue_time_seconds"
    assert out["absent"]["server_mean_ttft_ms"] == "vllm:time_to_first_token_seconds counted no request during the run"
    assert server_latencies("u", None, "x")["absent"] == {"server_latencies": "no scrape before the run"}
    assert server_latencies("u", histograms(1, 1, 1), ScrapeError("GET u: HTTP 404"))["absent"] == {
        "server_latencies": "GET u: HTTP 404"}
