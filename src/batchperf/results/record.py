"""The record of one cell: what a performance cell stores in pytest-benchmark's ``extra_info``.

One typed record serves every reader (gate, refresh, compare, report,
recommend, merge, history, export): ``CellRecord.from_dict`` validates and
``to_dict`` writes the same JSON back. Its schema is ``SCHEMA_VERSION``;
records of schema 1 are upgraded on read (see :func:`upgrade`), so older
results files and baselines stay readable. Every problem is a
:class:`ResultsError` that names the file, the cell and the field, and says
what to do. The layout is documented in docs/results-schema.md.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from batchperf.measure import client_lag
from batchperf.measure import counters as engine_counters
from batchperf.measure.catalogue import METRIC_SECTIONS, PER_TENANT, SIGNED
from batchperf.measure.kv_growth import KVPoint
from batchperf.measure.trace import RunTrace
from batchperf.measure.weights import WEIGHTS

SCHEMA_VERSION = 2
SCHEMA_KEY = "batchperf_schema"
# Sections every cell has; the rest may be absent (older or trimmed records).
REQUIRED = ("cell", "metrics", "rounds", "kv")
# the sections a dotted path may start with (CellRecord.raw), each a mapping: the cell's own two and the catalogue's
# measured ones; any other is looked up in ``other``
SECTIONS = ("cell", "model", *METRIC_SECTIONS)
OPTIONAL_SECTIONS = ("workload", "slo", "tenants", "capacity", "policy", "engine")  # written only when measured
CELL_FIELDS = ("id", "tier", "model", "backend", "batch_size", "prompt_len", "concurrency")
# Where a number lives in a record: a tuple of keys, or a catalogue path of fixed identifiers joined by dots
# (STYLE.md rule 15: a user's name, e.g. a tenant "chat.v2", is always its own key, never spliced into a string).
RecordPath = tuple[str, ...] | str


class ResultsError(ValueError):
    """A results file, baseline or record that cannot be used: names where, the problem and the fix."""

    def __init__(self, where: str | Path, problem: str, fix: str = "") -> None:
        self.where, self.problem, self.fix = str(where), problem, fix
        super().__init__(f"{where}: {problem}" + (f". {fix}" if fix else ""))


RERUN = "Re-run the cells with this batchperf to write a new results file"
# the numbers of a cell's efficiency section (each may be absent or null: no peak known for the device)
EFFICIENCY_NUMBERS = ("decode_mbu", "prefill_mfu", "decode_bandwidth_bytes_per_s", "prefill_flops_per_s",
                      "peak_bandwidth_bytes_per_s", "peak_flops_per_s", "decode_steps", "prefill_steps")


@dataclass(slots=True)
class CellRecord:
    """One measured cell. ``fullname`` and ``source`` say where a reader found it; they are not stored."""

    cell: dict[str, Any]  # the cell's parameters (suite.matrix Cell.describe() + dtype)
    model: dict[str, Any]  # source, path, config_hash, weights
    metrics: dict[str, float]  # median over the measured rounds (vllm bench serve names)
    rounds: list[dict[str, float]]  # every measured round's metrics
    kv: dict[str, Any]  # analytic and measured KV figures
    telemetry: dict[str, Any] = field(default_factory=dict)  # telemetry.sampler: the last round's; per token, median
    counters: dict[str, Any] = field(default_factory=dict)  # engine counters over the rounds (measure.counters)
    token_count_errors: list[str] = field(default_factory=list)
    traces: list[dict[str, Any]] = field(default_factory=list)  # RunTrace.to_dict() of each measured round
    # decode MBU and prefill MFU against the device's peaks (batchperf.measure.efficiency); empty in older records
    efficiency: dict[str, Any] = field(default_factory=dict)
    # a server cell's client-lag check over its rounds (batchperf.measure.client_lag); empty for other backends
    client: dict[str, Any] = field(default_factory=dict)
    # SLO attainment, goodput and fairness over the whole cell (batchperf.measure.slo); empty in older records
    slo: dict[str, Any] = field(default_factory=dict)
    # one block per tenant ("" when the workload has none): attainment, goodput, vLLM latencies of its requests
    tenants: dict[str, dict[str, Any]] = field(default_factory=dict)
    capacity: dict[str, Any] = field(default_factory=dict)  # batchperf capacity's result (its own results file)
    # the traffic (batchperf.workload.traffic.describe_workload): kind, load, file hash, SLOs, expected prefix-hit
    # rate, how the backend treated priorities; empty in older records
    workload: dict[str, Any] = field(default_factory=dict)
    # the batching policy (issue 27): name, parameters, label, the engine that ran it and what it did (its state)
    policy: dict[str, Any] = field(default_factory=dict)
    # what the engine ran with that moves its speed and is set outside the cell (vLLM's CPU variables, engine
    # arguments: backends._vllm.speed_settings); matched like the cell (regress.fingerprint.cell_identity); empty
    # for backends that have none, and in older records
    engine: dict[str, Any] = field(default_factory=dict)
    gate: dict[str, Any] | None = None  # the gate's verdict for this cell, when it was compared
    gate_remeasured: dict[str, Any] | None = None  # metrics/rounds of the gate's re-measurement
    pooled_runs: int | None = None  # in a baseline pooled from several runs: how many
    other: dict[str, Any] = field(default_factory=dict)  # keys a newer batchperf wrote: kept, never dropped
    fullname: str = ""  # pytest's node id, from the results file
    source: str = ""  # the results file's name (stem), to tell runs apart

    # --- the cell's parameters, typed ---

    @property
    def id(self) -> str:
        return str(self.cell["id"])

    @property
    def tier(self) -> str:
        return str(self.cell.get("tier", "*"))

    @property
    def model_name(self) -> str:
        return str(self.cell["model"])

    @property
    def backend(self) -> str:
        return str(self.cell["backend"])

    @property
    def batch_size(self) -> int:
        return int(self.cell["batch_size"])

    @property
    def concurrency(self) -> int:
        return int(self.cell["concurrency"])

    @property
    def prompt_label(self) -> str:
        return str(self.cell["prompt_len"])

    @property
    def prompt_tokens(self) -> float:
        """Mean prompt length in tokens: what the label names when fixed, else what was sent."""
        if self.prompt_label.isdigit():
            return float(self.prompt_label)
        done = self.metrics.get("completed") or 0
        return self.metrics.get("total_input_tokens", 0) / done if done else math.nan

    @property
    def load(self) -> float:
        """The offered-load factor it ran at (``--batchperf-load``): the workload section's, else the cell's (the
        matrix stores none at load 1; a capacity record keeps its probe's in the workload only); 1 when neither holds
        a number."""
        for raw in (self.workload.get("load"), self.cell.get("load")):
            if isinstance(raw, (int, float)) and not isinstance(raw, bool):
                return float(raw)
        return 1.0

    @property
    def open_loop(self) -> bool:
        """Its requests were due at their offsets (a trace, tenants, a request rate), not sent as others finished:
        the workload section's word, else (a record from before it) whether the cell's arrivals had a rate."""
        if isinstance(found := self.workload.get("open_loop"), bool):
            return found
        arrival = self.cell.get("arrival")
        return isinstance(arrival, Mapping) and arrival.get("kind") == "rate"

    @property
    def config_hash(self) -> str | None:
        return self.model.get("config_hash")

    @property
    def weights(self) -> str:
        """``checkpoint`` or ``dummy`` (seeded random weights from the model's config)."""
        return str(self.model.get("weights", "checkpoint"))

    # --- values ---

    def raw(self, path: RecordPath, default: Any = None) -> Any:
        """Whatever is at ``path``: a tuple of keys (``("tenants", name, "attainment")``: a tenant's name is one key,
        dots and all), or a catalogue path of fixed identifiers (``metrics.output_throughput``, split on its dots;
        never one holding a user's name); ``default`` when it is absent."""
        section, *rest = path.split(".") if isinstance(path, str) else path
        node: Any = getattr(self, section) if section in SECTIONS else self.other.get(section, default)
        for part in rest:
            if not isinstance(node, Mapping) or part not in node:
                return default
            node = node[part]
        return node

    def value(self, path: RecordPath) -> float | None:
        """The number at ``path`` (as :meth:`raw` reads it); None when absent or not a finite number."""
        node = self.raw(path)
        if isinstance(node, bool) or not isinstance(node, (int, float)) or not math.isfinite(node):
            return None
        return float(node)

    def round_values(self, path: RecordPath) -> list[float] | None:
        """Every measured round's value of a ``metrics`` figure (each round holds the same names), in round order;
        None for a figure of another section, when a round lacks it or holds no finite positive number, or when the
        rounds are not the ones the figure was taken from (their median is not the record's figure: a record
        edited by hand, or pooled from several runs)."""
        section, *rest = path.split(".") if isinstance(path, str) else path
        figure = self.value(path)
        if section != "metrics" or len(rest) != 1 or not self.rounds or figure is None:
            return None
        values = [r.get(rest[0]) for r in self.rounds]
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0
                   for v in values):
            return None
        if not math.isclose(statistics.median(values), figure, rel_tol=1e-9):
            return None
        return [float(v) for v in values]

    def starved(self) -> list[str]:
        """The tenants its policy starved (``tenants.<t>.starved``, measure.slo): such a cell is never a pass."""
        return sorted(t for t, block in self.tenants.items() if block.get("starved"))

    def kv_point(self) -> KVPoint:
        """This cell's point of the KV-growth fit (:mod:`batchperf.measure.kv_growth`)."""
        return KVPoint(self.model_name, self.backend, self.kv.get("kv_tokens_per_request_mean"),
                       self.kv.get("kv_bytes_per_request_mean"), self.kv.get("bytes_per_token_analytic"),
                       str(self.cell.get("workload", "")))

    def run_traces(self) -> list[RunTrace]:
        """The raw per-request traces of every measured round."""
        try:
            return [RunTrace.from_dict(t) for t in self.traces]
        except ValueError as exc:
            raise ResultsError(self.where, f"traces: {exc}", RERUN) from None

    @property
    def where(self) -> str:
        return f"{self.source or 'results'}: {self.cell.get('id', self.fullname or '?')}"

    # --- (de)serialisation ---

    def to_dict(self, with_traces: bool = True) -> dict[str, Any]:
        data: dict[str, Any] = {SCHEMA_KEY: SCHEMA_VERSION}
        for f in fields(self):
            if f.name in ("other", "fullname", "source") or (f.name == "traces" and not with_traces):
                continue
            value = getattr(self, f.name)
            if f.name in OPTIONAL_SECTIONS and not value:  # absent, not empty: records before they existed read alike
                continue
            if value is not None:
                data[f.name] = value
        return {**data, **self.other}

    def without_traces(self) -> CellRecord:
        return replace(self, traces=[])

    @classmethod
    def from_dict(cls, data: Any, where: str = "results", fullname: str = "", source: str = "") -> CellRecord:
        """Validate and type ``extra_info``; schema-1 records are upgraded. ResultsError names the field."""
        if not isinstance(data, Mapping):
            raise ResultsError(where, "extra_info is not an object", RERUN)
        check_json_values(data, where)
        data = upgrade(dict(data), where)
        known = {f.name for f in fields(cls)} - {"other", "fullname", "source"}
        missing = [k for k in REQUIRED if k not in data]
        if missing:
            raise ResultsError(where, f"missing {', '.join(missing)} in extra_info; the file was cut or edited", RERUN)
        for key, kind in (*((section, Mapping) for section in SECTIONS), ("rounds", list),
                          ("token_count_errors", list), ("traces", list), ("engine", Mapping)):
            if key in data and not isinstance(data[key], kind):
                raise ResultsError(where, f"{key} is a {type(data[key]).__name__}, not a "
                                   f"{'mapping' if kind is Mapping else 'list'}", RERUN)
        if absent := [k for k in CELL_FIELDS if k not in data["cell"]]:
            raise ResultsError(where, f"cell lacks {', '.join(absent)}", RERUN)
        for key in ("batch_size", "concurrency"):  # read as int by every reader: refuse "x" here, by name
            value = data["cell"][key]
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ResultsError(where, f"cell.{key} is {value!r}, not a whole number >= 1", RERUN)
        for key in ("id", "model", "backend"):
            if not isinstance(data["cell"][key], str) or not data["cell"][key]:
                raise ResultsError(where, f"cell.{key} is {data['cell'][key]!r}, not a name", RERUN)
        for key, value in data["metrics"].items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ResultsError(where, f"metrics.{key} is {value!r}, not a number", RERUN)
        if bad := [t for t, block in (data.get("tenants") or {}).items() if not isinstance(block, Mapping)]:
            raise ResultsError(where, f"tenants.{bad[0]} is not a mapping of the tenant's metrics", RERUN)
        if not all(isinstance(r, Mapping) for r in data["rounds"]):
            raise ResultsError(where, "rounds holds something other than metric objects", RERUN)
        check_measured_numbers(data, where)
        if "counters" in data and (why := engine_counters.problem(data["counters"])) is not None:
            raise ResultsError(where, f"counters: {why}", RERUN)
        if "client" in data and (why := client_lag.problem(data["client"])) is not None:
            raise ResultsError(where, f"client: {why}", RERUN)
        if (weights := (data.get("model") or {}).get("weights", WEIGHTS[0])) not in WEIGHTS:
            raise ResultsError(where, f"model.weights is {weights!r}, not one of {', '.join(WEIGHTS)}", RERUN)
        for key in EFFICIENCY_NUMBERS:
            value = (data.get("efficiency") or {}).get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
                raise ResultsError(where, f"efficiency.{key} is {value!r}, not a number", RERUN)
        values = {k: v for k, v in data.items() if k in known}
        values.setdefault("model", {})
        record = cls(**{k: (dict(v) if isinstance(v, Mapping) else v) for k, v in values.items()},
                     other={k: v for k, v in data.items() if k not in known and k != SCHEMA_KEY},
                     fullname=fullname, source=source)
        return record


# Containers nested deeper than this are no results file's (a cell nests about 6 deep); Python's JSON reader and
# writer recurse, so a deeper document would end in RecursionError somewhere later.
MAX_DEPTH = 64
# An integer beyond this is no float (a 400-digit "metric"): float(), math.isfinite() and numpy would overflow.
MAX_INT = 2 ** 1023


def check_json_values(data: Any, where: str) -> None:
    """Refuse what parses as JSON but no reader can use: nesting deeper than MAX_DEPTH, an integer no float holds.

    Walks ``data`` without recursion; the ResultsError names the dotted path (``metrics.output_throughput``)."""
    stack: list[tuple[Any, str, int]] = [(data, "", 0)]
    while stack:
        node, at, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ResultsError(where, f"{at} is nested deeper than {MAX_DEPTH} levels: not a results file's shape",
                               RERUN)
        items = node.items() if isinstance(node, Mapping) else enumerate(node)
        for key, value in items:
            if isinstance(value, (Mapping, list)):
                stack.append((value, _child(at, key), depth + 1))
            elif type(value) is int and not -MAX_INT < value < MAX_INT:
                digits = len(str(abs(value))) if value.bit_length() < 14_000 else "4000-plus"
                raise ResultsError(where, f"{_child(at, key)} is a {digits}-digit integer: too large for a number "
                                   "(a float holds at most about 1.8e308)", RERUN)


def _child(at: str, key: Any) -> str:
    return f"{at}[{key}]" if isinstance(key, int) else f"{at}.{key}" if at else str(key)


# Sections whose numbers are measurements: counts, seconds, rates, bytes, %, W, J. None is negative or infinite.
# The workload's section holds settings, and the tenants' blocks are checked one by one.
MEASURED = tuple(s for s in METRIC_SECTIONS if s not in ("workload", PER_TENANT))


def check_measured_numbers(data: Mapping[str, Any], where: str) -> None:
    """Every number a cell measured is finite and >= 0 (a signed one, ``catalogue.SIGNED``, finite); a ResultsError
    names the cell and the metric otherwise.

    A NaN left by an edit or a bug would be read as "absent" (its metric silently not judged) and a
    negative throughput as a huge improvement, so neither is ever read or written (issue 14)."""
    blocks = [(section, data.get(section)) for section in MEASURED]
    blocks += [(f"rounds[{i}]", r) for i, r in enumerate(data.get("rounds") or [])]
    tenants = data.get("tenants")
    blocks += [(f"tenants.{t}", b) for t, b in tenants.items()] if isinstance(tenants, Mapping) else []
    for label, block in blocks:
        if not isinstance(block, Mapping):
            continue
        for key, value in block.items():
            values = value if isinstance(value, list) else [value]
            floor = -math.inf if f"{label}.{key}" in SIGNED else 0
            for v in values:
                if isinstance(v, (int, float)) and not isinstance(v, bool) and not (math.isfinite(v) and v >= floor):
                    what = "a finite number" if floor < 0 else "a finite number >= 0"
                    raise ResultsError(where, f"{label}.{key} is {v!r}: a measured value must be {what}",
                                       "Restore the file (git checkout) or re-run the cell; a baseline is made only "
                                       "by `batchperf refresh`")


def upgrade(data: dict[str, Any], where: str = "results") -> dict[str, Any]:
    """``extra_info`` of any schema this batchperf reads, as the current schema.

    Schema 1 kept a ``memory`` section (``peak_rss_bytes`` there was the process's lifetime peak) beside
    ``telemetry.peak_rss_bytes`` (the peak sampled during the cell). Schema 2 names each for its meaning,
    in ``telemetry``: ``process_peak_rss_bytes`` and ``cell_peak_rss_bytes``.
    """
    version = data.get(SCHEMA_KEY)
    if version == SCHEMA_VERSION:
        return data
    if version != 1:
        raise ResultsError(where, f"cell schema {version!r}; this batchperf reads schemas 1 and {SCHEMA_VERSION}",
                           "Read it with the batchperf that wrote it, or re-run the cells with this one")
    data = dict(data)
    for key in ("memory", "telemetry"):
        if data.get(key) is not None and not isinstance(data[key], Mapping):
            raise ResultsError(where, f"{key} is a {type(data[key]).__name__}, not a mapping (schema 1)", RERUN)
    memory = data.pop("memory", None) or {}
    telemetry = dict(data.get("telemetry") or {})
    if "peak_rss_bytes" in telemetry:
        telemetry["cell_peak_rss_bytes"] = telemetry.pop("peak_rss_bytes")
    if "peak_rss_bytes" in memory:
        telemetry.setdefault("process_peak_rss_bytes", memory["peak_rss_bytes"])
    for key in ("torch_peak_allocated_bytes", "torch_peak_reserved_bytes"):
        if key in memory:
            telemetry.setdefault(key, memory[key])
    for trace in data.get("traces") or []:
        if isinstance(trace, dict):
            trace.pop("memory", None)
    data["telemetry"] = telemetry
    data[SCHEMA_KEY] = SCHEMA_VERSION
    return data
