"""A results file as OpenMetrics text, and pushed to a Prometheus Pushgateway (``batchperf export``).

Every cell's numbers become gauges, one family per measured quantity, with a
label per matrix axis (cell id, model, backend, batch size, prompt length,
concurrency, tier, dtype) and per run (hardware fingerprint, commit, and the
version of each upgrade axis: ``torch_version``, ``vllm_version``, ...). Names
follow Prometheus conventions: the unit in the name, seconds not milliseconds
(``batchperf_ttft_seconds{stat="p99"}`` is the cell's ``p99_ttft_ms`` / 1000), a ``tenant`` label on the
per-tenant families (``batchperf_tenant_slo_attainment_ratio{tenant="chat"}``; ``""``: no tenants),
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
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from batchperf.measure.catalogue import EXPORTED, Metric
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
    """One exported gauge family: ``name`` (with its unit suffix) and the catalogue entries that are its samples."""

    name: str
    help: str
    unit: str  # "" or the unit the name ends with (OpenMetrics # UNIT)
    entries: tuple[Metric, ...]

    @property
    def extra_labels(self) -> tuple[str, ...]:
        return tuple(self.entries[0].labels) + (("tenant",) if self.entries[0].per_tenant else ())

    def samples(self, record: CellRecord) -> Iterator[tuple[dict[str, str], float]]:
        for entry in self.entries:
            if entry.per_tenant:  # one sample per tenant ("" when the workload has none), told apart by its label
                for tenant in sorted(record.raw(entry.section) or {}):
                    value = record.value(entry.tenant_keys(tenant))
                    if value is not None:
                        yield {**entry.labels, "tenant": tenant}, value * entry.scale
                continue
            value = record.value(entry.path)
            if value is not None:
                yield dict(entry.labels), value * entry.scale


def _families() -> tuple[Family, ...]:
    """One family per export name of the catalogue, its entries told apart by their labels (``stat``)."""
    groups: dict[str, list[Metric]] = {}
    for entry in EXPORTED:
        groups.setdefault(entry.export, []).append(entry)
    return tuple(Family(PREFIX + name, entries[0].family_help or entries[0].help, entries[0].export_unit,
                        tuple(entries)) for name, entries in groups.items())


FAMILIES: tuple[Family, ...] = _families()
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
