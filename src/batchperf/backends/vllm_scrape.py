"""A vLLM server's own ``/metrics``, scraped around a run: its engine counters (:mod:`batchperf.measure.counters`).

Counters and histograms (preemptions, prefix-cache queries and hits, engine
steps and the tokens they carried, prefill and decode time) are read before
the run and after it, and the run's figure is the difference. Gauges (KV-cache
usage, running and waiting requests) say nothing once the run is over, so a
background thread also fetches ``/metrics`` every ``interval_s`` during the
run, and their peak is the highest *sampled* value: a lower bound of the true
peak, from as many samples as the run lasted intervals. Sampling costs the
server one render of its metrics (~30 ms of CPU for vLLM 0.32) per sample;
``interval_s=0`` turns it off (the peaks are then absent, with that reason).
The thread only fetches text; it is parsed after the run, off the clock.

The text is parsed with ``prometheus_client``'s parser. When ``/metrics`` is
missing, unreachable or not Prometheus text, the run goes on and every
counter it would have given is absent, with the reason.
"""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from batchperf.measure.counters import COUNTERS, absent_all, fraction_problem, round_counters

# raw counter key -> the vLLM sample whose difference over the run it is (summed over engines)
DELTAS: dict[str, str] = {
    "num_preemptions": "vllm:num_preemptions_total",
    "prefix_cache_queries": "vllm:prefix_cache_queries_total",
    "prefix_cache_hits": "vllm:prefix_cache_hits_total",
    "prompt_tokens": "vllm:prompt_tokens_total",
    "engine_steps": "vllm:iteration_tokens_total_count",
    "iteration_tokens_total": "vllm:iteration_tokens_total_sum",
    "prefill_time_seconds_sum": "vllm:request_prefill_time_seconds_sum",
    "decode_time_seconds_sum": "vllm:request_decode_time_seconds_sum",
    "finished_requests": "vllm:request_prefill_time_seconds_count",
}
# counter -> (the vLLM gauge, how its engines combine): sampled during the run
PEAK_GAUGES: dict[str, tuple[str, Callable[[list[float]], float]]] = {
    "kv_cache_usage_perc": ("vllm:kv_cache_usage_perc", max),  # each engine has its own pool
    "num_requests_running": ("vllm:num_requests_running", sum),
    "num_requests_waiting": ("vllm:num_requests_waiting", sum),
}
# server-side latency -> the vLLM histogram whose _sum / _count over the run is its mean (vLLM 0.32,
# vllm/v1/metrics/loggers.py; seconds, from the request's arrival in the server's frontend)
VLLM_HISTOGRAMS: dict[str, str] = {
    "ttft": "vllm:time_to_first_token_seconds",
    "e2el": "vllm:e2e_request_latency_seconds",
    "queue": "vllm:request_queue_time_seconds",
    "tpot": "vllm:request_time_per_output_token_seconds",
}
NOT_SERVED = {
    "num_requests_running_mean": "a server's /metrics has no per-step request count (only a gauge)",
    "padding_waste": "no padding: vLLM packs ragged requests into one step (paged KV)",
}
FETCH_TIMEOUT_S = 5.0


class ScrapeError(Exception):
    """``/metrics`` could not be fetched or parsed; the message is the reason counters are absent."""


def fetch(url: str, timeout: float = FETCH_TIMEOUT_S) -> str:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.read().decode("utf-8", errors="replace")
    except urllib.error.HTTPError as exc:
        exc.close()  # it holds the response's socket
        raise ScrapeError(f"GET {url}: HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise ScrapeError(f"GET {url}: {getattr(exc, 'reason', exc)}") from None


def parse(text: str, url: str = "/metrics") -> dict[str, list[float]]:
    """Sample name -> its values (one per label set), by prometheus_client's text parser."""
    from prometheus_client.parser import text_string_to_metric_families

    samples: dict[str, list[float]] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                samples.setdefault(sample.name, []).append(float(sample.value))
    except (ValueError, TypeError, IndexError) as exc:
        raise ScrapeError(f"{url} is not Prometheus text ({type(exc).__name__}: {exc})") from None
    if not samples:
        raise ScrapeError(f"{url} holds no metrics")
    return samples


class ServerScrape:
    """``start()`` before a run, ``stop()`` after it: the run's counters, from ``url`` (a server's /metrics)."""

    def __init__(self, url: str, interval_s: float, thread_setup: Callable[[], object] | None = None) -> None:
        """``thread_setup``: called first in the sampling thread (the client's scheduling, say)."""
        if interval_s < 0:
            raise ValueError(f"interval_s must be >= 0, got {interval_s}")
        self.url = url
        self.interval_s = interval_s
        self.thread_setup = thread_setup
        self.before: str | ScrapeError | None = None
        self.samples: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.result: dict[str, Any] = {}
        self.latencies: dict[str, Any] = {}  # the server's own mean latencies over the run (server_latencies)

    def _get(self) -> str | ScrapeError:
        try:
            return fetch(self.url)
        except ScrapeError as exc:
            return exc

    def start(self) -> None:
        """Scrape once, then start sampling; returns once the sampling thread has run ``thread_setup``, so that a
        run started next never finds it at its old scheduling (seen: the real-time check caught the sampler still
        at normal priority at the run's first request, 1 in ~1,800 tests, 2026-12-07)."""
        self.before = self._get()
        if self.interval_s > 0:
            ready = threading.Event()
            self._thread = threading.Thread(target=self._sample, args=(ready,), name="batchperf-metrics-sampler",
                                            daemon=True)
            self._thread.start()
            ready.wait()

    def _sample(self, ready: threading.Event) -> None:
        try:
            if self.thread_setup is not None:
                self.thread_setup()
        finally:
            ready.set()
        while not self._stop.wait(self.interval_s):
            text = self._get()
            if isinstance(text, str):
                self.samples.append(text)

    def stop(self) -> dict[str, Any]:
        """Stop sampling, scrape once more, and return the run's counters (also kept in ``result``)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        after = self._get()
        self.result = counters_from_scrapes(self.url, self.before, after, self.samples, self.interval_s)
        self.latencies = server_latencies(self.url, self.before, after)
        return self.result


def _before_after(url: str, before: str | ScrapeError | None, after: str | ScrapeError) -> tuple[Any, Any]:
    """The parsed scrapes before and after a run; ScrapeError when either is missing or failed."""
    if before is None:
        raise ScrapeError("no scrape before the run")
    start = parse(before, url) if isinstance(before, str) else _raise(before)
    end = parse(after, url) if isinstance(after, str) else _raise(after)
    return start, end


def counters_from_scrapes(url: str, before: str | ScrapeError | None, after: str | ScrapeError,
                          samples: list[str], interval_s: float) -> dict[str, Any]:
    """The run's counters from the text before and after it and the texts sampled during it."""
    source = f"{url}: before/after the run, {len(samples)} sample(s) during it"
    try:
        start, end = _before_after(url, before, after)
    except ScrapeError as exc:
        return round_counters({}, absent_all(str(exc)), source)
    values: dict[str, float] = {}
    absent = dict(NOT_SERVED)
    for key, name in DELTAS.items():
        if name not in start or name not in end:
            _absent(absent, key, f"{url} has no {name}")
        elif (delta := sum(end[name]) - sum(start[name])) < 0:
            _absent(absent, key, f"{name} went down ({sum(start[name])} -> {sum(end[name])}): "
                                 "the server restarted during the run")
        else:
            values[key] = delta
    peaks = _peaks(url, samples)
    for counter, (name, combine) in PEAK_GAUGES.items():
        seen = [combine(s[name]) for s in peaks if name in s]
        if seen and fraction_problem(counter, max(seen)):  # a server that says percent: no peak, the reason
            absent[counter] = (f"{name} read {max(seen)!r}, above 1: not the fraction vLLM publishes (a server "
                               "that reports percent?); no peak is stored")
        elif seen:
            values[counter] = max(seen)
        elif interval_s <= 0:
            absent[counter] = f"{name} is a gauge, read only before and after the run (sampling is off)"
        else:
            absent[counter] = (f"no sample of {name} during the run ({len(peaks)} parsed of {len(samples)}, "
                               f"one every {interval_s} s)")
    return round_counters(values, absent, source)


def _absent(absent: dict[str, str], raw_key: str, reason: str) -> None:
    """Every counter made of ``raw_key`` is absent for ``reason`` (the first reason found stays)."""
    for counter in COUNTERS:
        if raw_key in counter.raw:
            absent.setdefault(counter.name, reason)


def _raise(exc: ScrapeError) -> dict[str, list[float]]:
    raise exc


def _peaks(url: str, samples: list[str]) -> list[dict[str, list[float]]]:
    parsed = []
    for text in samples:
        try:
            parsed.append(parse(text, url))
        except ScrapeError:
            continue  # one bad sample costs a sample, not the peak
    return parsed


def server_latencies(url: str, before: str | ScrapeError | None, after: str | ScrapeError) -> dict[str, Any]:
    """The server's own mean latencies over the run, from its histograms' ``_sum`` and ``_count`` before and after:
    ``server_mean_{ttft,e2el,queue,tpot}_ms`` and ``server_requests`` (the requests its E2E histogram counted);
    what it cannot give is in ``absent``. Only means: a histogram keeps bucket counts, not the values."""
    try:
        start, end = _before_after(url, before, after)
    except ScrapeError as exc:
        return {"absent": {"server_latencies": str(exc)}}
    out: dict[str, Any] = {}
    absent: dict[str, str] = {}
    for family, name in VLLM_HISTOGRAMS.items():
        total, count = f"{name}_sum", f"{name}_count"
        if not all(k in start and k in end for k in (total, count)):
            absent[f"server_mean_{family}_ms"] = f"{url} has no {name}"
            continue
        n = sum(end[count]) - sum(start[count])
        if n <= 0:
            absent[f"server_mean_{family}_ms"] = f"{name} counted no request during the run"
            continue
        out[f"server_mean_{family}_ms"] = (sum(end[total]) - sum(start[total])) / n * 1e3
        if family == "e2el":
            out["server_requests"] = n
    return {**out, "absent": absent}
