"""A server's own mean latencies over a run, from its /metrics histograms before and after it."""

from __future__ import annotations

import threading
import time

import pytest

from batchperf.backends import vllm_scrape
from batchperf.backends.vllm_scrape import ScrapeError, ServerScrape, server_latencies


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


def test_start_returns_only_once_the_sampling_thread_has_run_its_setup(monkeypatch: pytest.MonkeyPatch) -> None:
    """The client raises its threads' scheduling before a run (issue 39); the sampler raises itself in its own
    thread. Were start() to return before that, the run's first requests would find it still at normal priority
    (seen once in a full test run, tests/backends/test_realtime.py)."""
    monkeypatch.setattr(vllm_scrape, "fetch", lambda url: "")
    done: list[str] = []

    def slow_setup() -> None:
        time.sleep(0.2)
        done.append(threading.current_thread().name)

    scrape = ServerScrape("http://127.0.0.1:9/metrics", 0.05, thread_setup=slow_setup)
    scrape.start()
    assert done == ["batchperf-metrics-sampler"]
    scrape.stop()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # the thread's own error
def test_a_setup_that_fails_does_not_hang_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vllm_scrape, "fetch", lambda url: "")

    def broken() -> None:
        raise OSError("no CAP_SYS_NICE")

    scrape = ServerScrape("http://127.0.0.1:9/metrics", 0.05, thread_setup=broken)
    scrape.start()  # returns: the thread ends with its error, as it did before
    scrape.stop()
    assert scrape._thread is not None and not scrape._thread.is_alive()
