"""A results file as OpenMetrics text, and pushed to a Prometheus Pushgateway (``batchperf export``).

Every cell's numbers become gauges, one family per measured quantity, with a
label per matrix axis (cell id, model, backend, batch size, prompt length,
concurrency, tier, dtype) and per run (hardware fingerprint, commit, and the
version of each upgrade axis: ``torch_version``, ``vllm_version``, ...). Names
follow Prometheus conventions: the unit in the name, seconds not milliseconds
(``batchperf_ttft_seconds{stat="p99"}`` is the cell's ``p99_ttft_ms`` / 1000),
and no ``_total``: nothing here is a counter that only grows, every value is a
figure of one run. A value the cell does not have (an engine counter its
backend lacks, a metric of another device) has no sample.

The text is written by ``prometheus_client`` from a registry with a custom
collector (:class:`ResultsCollector`), never formatted here, so label values
with quotes, backslashes or newlines are escaped as the format says. With a
history folder, the change points ``batchperf history`` finds become
``batchperf_history_change_point_timestamp_seconds`` (when the new level
starts) and ``..._ratio`` (its size), for dashboards to draw as annotations
(ci/grafana/batchperf-history.json).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from batchperf.results.io import ResultsFile
from batchperf.results.record import CellRecord

PREFIX = "batchperf_"
CELL_LABELS = ("cell_id", "model", "backend", "batch_size", "prompt_len", "concurrency", "tier", "dtype")
RUN_LABELS = ("fingerprint", "commit")
DEFAULT_JOB = "batchperf"
UNKNOWN = "unknown"


class ExportError(RuntimeError):
    """The export could not be written or pushed; the message names what, why and the fix."""


@dataclass(frozen=True, slots=True)
class Family:
    """One exported gauge family: ``name`` (with its unit suffix) and where each of its samples comes from."""

    name: str
    help: str
    unit: str  # "" or the unit the name ends with (OpenMetrics # UNIT)
    samples: Callable[[CellRecord], Iterable[tuple[dict[str, str], float]]]

    @property
    def extra_labels(self) -> tuple[str, ...]:
        return ("stat",) if self.name in LATENCY_NAMES else ()


def _value(path: str, scale: float = 1.0) -> Callable[[CellRecord], Iterator[tuple[dict[str, str], float]]]:
    def samples(record: CellRecord) -> Iterator[tuple[dict[str, str], float]]:
        value = record.value(path)
        if value is not None:
            yield {}, value * scale
    return samples


def _latency(metric: str) -> Callable[[CellRecord], Iterator[tuple[dict[str, str], float]]]:
    def samples(record: CellRecord) -> Iterator[tuple[dict[str, str], float]]:
        for stat in LATENCY_STATS:
            value = record.value(f"metrics.{stat}_{metric}_ms")
            if value is not None:
                yield {"stat": stat}, value / 1000  # ms -> s
    return samples


LATENCY_STATS = ("mean", "median", "p90", "p99", "std")
LATENCIES = {"ttft": "time to first token, from the client's send time",
             "tpot": "time per output token after the first, per request",
             "itl": "inter-token latency, every gap pooled",
             "e2el": "end-to-end request latency"}
LATENCY_NAMES = frozenset(f"{PREFIX}{m}_seconds" for m in LATENCIES)

# (name, unit, dotted path in the cell record, scale, help)
_SINGLE: tuple[tuple[str, str, str, float, str], ...] = (
    ("output_throughput_tokens_per_second", "", "metrics.output_throughput", 1, "output tokens per second"),
    ("request_throughput_requests_per_second", "", "metrics.request_throughput", 1, "requests completed per second"),
    ("total_token_throughput_tokens_per_second", "", "metrics.total_token_throughput", 1,
     "input and output tokens per second"),
    ("request_goodput_requests_per_second", "", "metrics.request_goodput", 1, "requests per second meeting the SLOs"),
    ("duration_seconds", "seconds", "metrics.duration", 1, "wall time of a measured round"),
    ("completed_requests", "", "metrics.completed", 1, "requests completed in a round"),
    ("failed_requests", "", "metrics.failed", 1, "requests failed in a round"),
    ("input_tokens", "", "metrics.total_input_tokens", 1, "prompt tokens sent in a round"),
    ("output_tokens", "", "metrics.total_output_tokens", 1, "tokens generated in a round"),
    ("kv_cache_analytic_per_token_bytes", "bytes", "kv.bytes_per_token_analytic", 1,
     "KV-cache bytes per token: 2 x layers x kv_heads x head_dim x dtype bytes"),
    ("kv_cache_measured_per_token_bytes", "bytes", "kv.bytes_per_token_measured", 1,
     "KV-cache bytes per token the backend held"),
    ("kv_cache_per_request_bytes", "bytes", "kv.kv_bytes_per_request_mean", 1, "KV-cache bytes a request held (mean)"),
    ("kv_cache_peak_bytes", "bytes", "kv.kv_cache_peak_bytes", 1, "the backend's own KV-cache peak"),
    ("cell_peak_rss_bytes", "bytes", "telemetry.cell_peak_rss_bytes", 1, "largest process RSS sampled in the cell"),
    ("torch_peak_allocated_bytes", "bytes", "telemetry.torch_peak_allocated_bytes", 1, "torch's CUDA peak allocated"),
    ("gpu_energy_per_output_token_joules", "joules", "telemetry.joules_per_output_token", 1,
     "GPU energy (NVML) per output token"),
)
# engine counter (batchperf.measure.counters) -> (name, unit, help)
COUNTER_NAMES: dict[str, tuple[str, str, str]] = {
    "num_preemptions": ("engine_preemptions", "", "requests preempted per measured round (vllm:num_preemptions)"),
    "prefix_cache_queries": ("engine_prefix_cache_queries_tokens", "", "prefix-cache queries per round, tokens"),
    "prefix_cache_hits": ("engine_prefix_cache_hits_tokens", "", "prefix-cache hits per round, tokens"),
    "kv_cache_usage_perc": ("engine_kv_cache_usage_peak_ratio", "ratio", "peak fraction of the KV pool in use"),
    "num_requests_running": ("engine_requests_running_peak", "", "peak requests running in an engine step"),
    "num_requests_waiting": ("engine_requests_waiting_peak", "", "peak requests waiting in the engine"),
    "engine_steps": ("engine_steps", "", "engine steps per measured round"),
    "iteration_tokens_mean": ("engine_step_tokens_mean", "", "tokens per engine step: the batch formed"),
    "num_requests_running_mean": ("engine_step_requests_mean", "", "requests per engine step: the batch formed"),
    "padding_waste": ("engine_padding_waste_ratio", "ratio", "share of computed token slots that were padding"),
    "request_prefill_time_seconds": ("engine_request_prefill_seconds", "seconds", "mean prefill time of a request"),
    "request_decode_time_seconds": ("engine_request_decode_seconds", "seconds", "mean decode time of a request"),
}

FAMILIES: tuple[Family, ...] = (
    *(Family(PREFIX + name, text, unit, _value(path, scale)) for name, unit, path, scale, text in _SINGLE),
    *(Family(f"{PREFIX}{m}_seconds", f"{text} (stat: mean, median, p90, p99, std)", "seconds", _latency(m))
      for m, text in LATENCIES.items()),
    *(Family(PREFIX + name, text, unit, _value(f"counters.{counter}"))
      for counter, (name, unit, text) in COUNTER_NAMES.items()),
)
CHANGE_POINT_TIME = f"{PREFIX}history_change_point_timestamp_seconds"
CHANGE_POINT_RATIO = f"{PREFIX}history_change_point_ratio"


def exported_names() -> set[str]:
    """Every metric name an export can write (what a dashboard may query)."""
    return {f.name for f in FAMILIES} | {CHANGE_POINT_TIME, CHANGE_POINT_RATIO}


def label_name(key: str) -> str:
    """A valid Prometheus label name for an upgrade axis: ``pytest-benchmark`` -> ``pytest_benchmark_version``."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", key) + "_version"


class ResultsCollector:
    """A ``prometheus_client`` collector over one results file (and, optionally, its history's change points)."""

    def __init__(self, results: ResultsFile, change_points: list[Any] | None = None) -> None:
        self.results = results
        self.change_points = change_points or []
        fingerprint = results.fingerprint or {}
        upgrade = fingerprint.get("upgrade") or {}
        self.run_labels = {"fingerprint": str(fingerprint.get("key") or UNKNOWN),
                           "commit": str(results.commit_info.get("id") or UNKNOWN),
                           **{label_name(k): str(v) for k, v in sorted(upgrade.items())}}

    def labels(self, record: CellRecord) -> dict[str, str]:
        return {**{name: str(record.cell.get(name.removeprefix("cell_"), "")) for name in CELL_LABELS},
                **self.run_labels}

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        names = [*CELL_LABELS, *self.run_labels]
        for family in FAMILIES:
            gauge = GaugeMetricFamily(family.name, family.help, labels=[*names, *family.extra_labels],
                                      unit=family.unit)
            for record in self.results.records:
                base = self.labels(record)
                for extra, value in family.samples(record):
                    if math.isfinite(value):
                        gauge.add_metric([*base.values(), *extra.values()], value)
            if gauge.samples:
                yield gauge
        yield from self._change_points(names)

    def _change_points(self, names: list[str]) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        if not self.change_points:
            return
        extra = ["metric", "direction"]
        when = GaugeMetricFamily(CHANGE_POINT_TIME, "when a change point of `batchperf history` starts (the first "
                                 "run of the new level)", labels=[*names, *extra], unit="seconds")
        size = GaugeMetricFamily(CHANGE_POINT_RATIO, "size of a change point: mean after / mean before - 1",
                                 labels=[*names, *extra], unit="ratio")
        for point in self.change_points:
            record = point.run.cells_by_id[point.cell]
            values = [*self.labels(record).values(), point.metric.split(".", 1)[1], "worse" if point.worse else "better"]
            timestamp = _epoch(point.run.datetime)
            if timestamp is not None:
                when.add_metric(values, timestamp)
            if math.isfinite(point.change):
                size.add_metric(values, point.change)
        yield from (f for f in (when, size) if f.samples)


def _epoch(text: str) -> float | None:
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def registry(results: ResultsFile, change_points: list[Any] | None = None) -> Any:
    from prometheus_client import CollectorRegistry

    reg = CollectorRegistry(auto_describe=True)
    reg.register(ResultsCollector(results, change_points))
    return reg


def openmetrics(results: ResultsFile, change_points: list[Any] | None = None) -> str:
    """The OpenMetrics text of ``results`` (ends with ``# EOF``)."""
    from prometheus_client.openmetrics.exposition import generate_latest

    return generate_latest(registry(results, change_points)).decode("utf-8")


def grouping_key(results: ResultsFile) -> dict[str, str]:
    """The Pushgateway group of a run besides its job: one per machine, so machines never overwrite each other."""
    return {"fingerprint": str((results.fingerprint or {}).get("key") or UNKNOWN)}


def push(results: ResultsFile, url: str, job: str = DEFAULT_JOB, change_points: list[Any] | None = None,
         timeout_s: float = 30.0) -> dict[str, str]:
    """Replace this machine's group (job + fingerprint) on the Pushgateway at ``url``; ExportError if it fails."""
    from prometheus_client import push_to_gateway

    key = grouping_key(results)
    try:
        push_to_gateway(url, job=job, registry=registry(results, change_points), grouping_key=key, timeout=timeout_s)
    except OSError as exc:  # urllib's URLError, and prometheus_client's OSError for an HTTP error status
        raise ExportError(f"pushing {results.path} to the Pushgateway at {url} failed: "
                          f"{getattr(exc, 'reason', None) or exc}. Check that the Pushgateway runs and the URL "
                          f"(e.g. http://HOST:9091); the results file is unchanged") from None
    return key


def history_change_points(folder: Path) -> list[Any]:
    """The change points ``batchperf history`` finds in ``folder`` (empty when too few runs to tell)."""
    from batchperf.regress.history import MIN_SEGMENT, change_points, load_history

    runs, _ = load_history(folder)
    return change_points(runs) if len(runs) >= 2 * MIN_SEGMENT else []
