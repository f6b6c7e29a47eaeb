"""The regression gate: a direction and a noise-aware tolerance per metric, a verdict per metric and per cell.

Every rule lives in :data:`RULES` (the one place to change a default). A metric
regresses when it moved in its bad direction by more than its tolerance::

    tolerance = max(floor[metric, tier], k × spread)

where ``spread`` is the baseline's own round-to-round relative spread (population
std / |median| over ``extra_info.rounds``). Exact metrics (KV bytes) have no
tolerance at all: any change is a regression, everywhere. Changes are relative,
so the unit a metric is stored in never matters.

The spread term has a ceiling, ``cap[metric, tier]``: a metric whose baseline is so
noisy that k × spread exceeds it cannot be gated, and says so (*too noisy to gate*)
instead of passing; it still fails a change beyond even its noise. A baseline value
the gate cannot judge against (NaN, infinite, negative, a zero throughput) is *not
judged*, never a pass. A cell passes only when every metric it was compared on did.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import Enum

from batchperf.regress.fingerprint import Fingerprint, cell_identity, identity_diff, soft_warnings, version_diff
from batchperf.results.record import CellRecord


class Direction(str, Enum):
    HIGHER = "higher"  # higher is better (throughput)
    LOWER = "lower"  # lower is better (latency, memory)
    EXACT = "exact"  # any change is a regression (KV bytes)


class Verdict(str, Enum):
    REGRESSION = "regression"
    MISSING = "missing"  # the baseline has it, this run does not: a check was lost
    PASS = "pass"
    IMPROVEMENT = "improvement"  # "refresh suggested"
    NO_BASELINE = "no-baseline"
    NOISY = "too-noisy"  # the baseline's own spread asks for more tolerance than the cap: cannot be gated
    NOT_JUDGED = "not-judged"  # the baseline's value cannot be judged against (NaN, inf, negative, zero throughput)

    @property
    def failed(self) -> bool:
        return self in (Verdict.REGRESSION, Verdict.MISSING)

    @property
    def unjudged(self) -> bool:
        """Compared with nothing usable: reported in the summary, failed under --batchperf-require-baseline."""
        return self in (Verdict.NO_BASELINE, Verdict.NOISY, Verdict.NOT_JUDGED)


# Best to worst, for "the verdict never improves as a slowdown grows".
VERDICT_RANK = {Verdict.IMPROVEMENT: 2, Verdict.PASS: 1, Verdict.NOISY: 1, Verdict.NOT_JUDGED: 1,
                Verdict.REGRESSION: 0, Verdict.MISSING: 0}
EXACT_REL = 1e-9  # exact metrics are floats (means of integers): allow only float rounding


DEVICES = ("cpu", "cuda")  # the device types a cell runs on (CellParams.device)


@dataclass(frozen=True, slots=True)
class Rule:
    metric: str  # dotted path into a cell's extra_info, e.g. "metrics.output_throughput"
    direction: Direction
    floors: Mapping[str, float] = field(default_factory=dict)  # tier -> relative floor; "*" for any tier
    devices: tuple[str, ...] = DEVICES  # where a cell produces the metric (torch's peaks: only on CUDA)
    # tier -> the most tolerance k × spread may give before the metric is too noisy to gate (never below the floor)
    caps: Mapping[str, float] = field(default_factory=dict)
    backends: tuple[str, ...] | None = None  # the backends whose cells produce it; None: every backend

    def __post_init__(self) -> None:
        if "." not in self.metric:
            raise ValueError(f"rule metric must be a dotted extra_info path, got {self.metric!r}")
        if not self.devices or not set(self.devices) <= set(DEVICES):
            raise ValueError(f"rule {self.metric}: devices must be some of {', '.join(DEVICES)}, got {self.devices}")
        if self.backends is not None and not self.backends:
            raise ValueError(f"rule {self.metric}: backends must name at least one backend, or be None for all")
        for kind, values in (("floor", self.floors), ("cap", self.caps)):
            for tier, value in values.items():
                if not 0 <= value < 10:
                    raise ValueError(f"rule {self.metric}: {kind} for tier {tier!r} must be in [0, 10), got {value}")

    def floor(self, tier: str) -> float:
        if self.direction is Direction.EXACT:
            return 0.0
        return self.floors.get(tier, self.floors.get("*", 0.0))

    def cap(self, tier: str) -> float:
        """The most tolerance the baseline's spread may buy; a floor raised above it raises it too."""
        return max(self.caps.get(tier, self.caps.get("*", 0.0)), self.floor(tier))

    @property
    def name(self) -> str:
        return self.metric.rsplit(".", 1)[1]

    def produced_on(self, device: str, backend: str | None = None) -> bool:
        """Whether a cell on ``device`` ("cpu", "cuda", "cuda:1") of ``backend`` (None: any) writes this metric."""
        return device.split(":")[0] in self.devices and (
            backend is None or self.backends is None or backend in self.backends)


# CPU-tier floors come from A/A reruns on a quiet 2-core VM, one torch thread (tools/detector_check.py,
# docs/baselines.md). How much a cell wanders from run to run depends on the cell: a compute-bound cell
# (hf-static bs8 p512 c16) stays within +-6% across processes; a dispatch-bound one (bs4 p64: tiny matmuls,
# Python and op-dispatch overhead) spans 18-29% between processes. The throughput floor is set for the steady
# cells (15%: above their worst A/A first measurement, -12.7%, below the -22%..-46% a 30% slower forward pass
# cost them); a noisy cell gets its wider tolerance from k x its own round-to-round spread in a baseline pooled
# from several runs (batchperf refresh --repeat). Tail latencies keep wide floors: P99 over 16 requests moves
# far more than throughput, and P99 ITL (the few slowest of ~370 token gaps: any OS hiccup) moved +66% and
# +88% in one A/A run, so on the CPU tier it only catches gross stalls (150%).
# GPU floors are the usual few percent of a dedicated device, and still UNMEASURED: no session that wrote them had a
# GPU. ci/gpu_check.sh measures what they must stand above: its A/A step runs two cells again in a fresh process
# and its summary prints |a - b| / mean per gated metric (docs/gpu.md); set each GPU floor above that spread (with
# room for k x the round-to-round spread) and say here which GPU and run it came from.
_TPUT = {"cpu": 0.15, "gpu": 0.05, "*": 0.10}
_TAIL = {"cpu": 0.40, "gpu": 0.10, "*": 0.15}  # P99 TTFT and E2EL
_STEP = {"cpu": 0.60, "gpu": 0.10, "*": 0.15}  # P99 TPOT
_GAP = {"cpu": 1.50, "gpu": 0.15, "*": 0.20}  # P99 ITL
# Caps: the most slack k x spread may buy. A throughput tolerance of 40% lets a 1.67x slowdown through; a
# baseline noisier than that cannot tell a 30% slower forward pass (-22..-28% throughput) from noise, so its
# cell reports itself too noisy to gate rather than pass. Tails get twice their floor (TPOT 1.0, ITL its
# floor); the GPU caps are three times the GPU floors. docs/baselines.md says what they do to the committed
# CPU baseline.
_TPUT_CAP = {"cpu": 0.40, "gpu": 0.15, "*": 0.30}
_TAIL_CAP = {"cpu": 0.80, "gpu": 0.30, "*": 0.45}
_STEP_CAP = {"cpu": 1.00, "gpu": 0.30, "*": 0.45}
_GAP_CAP = {"cpu": 1.50, "gpu": 0.45, "*": 0.60}
# the backends that measure the KV bytes each request held (vllm-server's client cannot see the server's cache)
_KV_MEASURED = ("hf-static", "continuous", "hf-continuous", "vllm", "vllm-prefix-cache")
RULES: tuple[Rule, ...] = (
    Rule("metrics.output_throughput", Direction.HIGHER, _TPUT, caps=_TPUT_CAP),
    Rule("metrics.request_throughput", Direction.HIGHER, _TPUT, caps=_TPUT_CAP),
    Rule("metrics.p99_ttft_ms", Direction.LOWER, _TAIL, caps=_TAIL_CAP),
    Rule("metrics.p99_tpot_ms", Direction.LOWER, _STEP, caps=_STEP_CAP),
    Rule("metrics.p99_itl_ms", Direction.LOWER, _GAP, caps=_GAP_CAP),
    Rule("metrics.p99_e2el_ms", Direction.LOWER, _TAIL, caps=_TAIL_CAP),
    Rule("kv.bytes_per_token_measured", Direction.EXACT, backends=_KV_MEASURED),
    Rule("kv.kv_bytes_per_request_mean", Direction.EXACT, backends=_KV_MEASURED),
    Rule("telemetry.torch_peak_allocated_bytes", Direction.LOWER, {"*": 0.05}, devices=("cuda",)),
    # RSS counts the whole process (the interpreter, torch, every model loaded so far) and allocator
    # caches that earlier cells left behind, so it depends on what ran before in the session even
    # when sampled per cell: only a gross change means something.
    Rule("telemetry.cell_peak_rss_bytes", Direction.LOWER, {"*": 0.50}),
    # Engine counters (batchperf.measure.counters), from the backends that have them. They count what the
    # scheduler did, not time, so their floors only absorb scheduling that moves with the machine's speed.
    # From none to some preemptions is always a regression (the KV budget no longer holds the batch).
    Rule("counters.num_preemptions", Direction.LOWER, {"*": 0.25},
         backends=("continuous", "vllm", "vllm-prefix-cache", "vllm-server")),
    # Static batches: the share of computed token slots that were padding or discarded decoding.
    Rule("counters.padding_waste", Direction.LOWER, {"*": 0.05}, backends=("hf-static",)),
)


@dataclass(frozen=True, slots=True)
class GateConfig:
    rules: tuple[Rule, ...] = RULES
    k: float = 3.0  # tolerance in units of the baseline's relative round-to-round spread

    def __post_init__(self) -> None:
        if not (self.k >= 0 and math.isfinite(self.k)):
            raise ValueError(f"gate k must be a finite number >= 0, got {self.k}")
        names = [r.metric for r in self.rules]
        if len(set(names)) != len(names):
            raise ValueError("gate rules name a metric twice")

    def with_floor(self, metric: str, value: float, tier: str = "*") -> GateConfig:
        """This config with ``metric``'s floor for ``tier`` set (``metric`` may omit its ``metrics.`` prefix)."""
        matches = [r for r in self.rules if metric in (r.metric, r.name)]
        if not matches:
            raise ValueError(f"no gate rule for metric {metric!r}; known: {', '.join(r.name for r in self.rules)}")
        target = matches[0]
        if target.direction is Direction.EXACT:
            raise ValueError(f"{target.metric} is exact: it has no tolerance to override")
        new = replace(target, floors={**({} if tier == "*" else target.floors), tier: value})
        return replace(self, rules=tuple(new if r is target else r for r in self.rules))


def relative_spread(record: CellRecord, path: str) -> float:
    """Population std / |median| of ``path`` over the record's rounds; 0 with fewer than two rounds.

    NaN when a round holds a value that is not a finite number >= 0 (the spread is unknown), and
    infinite when the values spread around a median of 0."""
    section, _, name = path.partition(".")
    if section != "metrics":
        return 0.0
    raw = [r[name] for r in record.rounds if isinstance(r, Mapping) and name in r]
    if any(bad_number(v) for v in raw):
        return math.nan
    values = [float(v) for v in raw]
    if len(values) < 2:
        return 0.0
    mid = abs(statistics.median(values))
    std = statistics.pstdev(values)
    if mid == 0:
        return 0.0 if std == 0 else math.inf
    return std / mid


def bad_number(value: object) -> str | None:
    """Why ``value`` is no measurement to judge against (a measurement is a finite number >= 0), or None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"{value!r} is not a number"
    if not math.isfinite(value):
        return f"{value} is not finite"
    return f"{value} is negative" if value < 0 else None


def _raw(record: CellRecord, path: str) -> object:
    """The value at dotted ``path`` of the record, whatever it is; ``_ABSENT`` when the path is missing."""
    node: object = {"metrics": record.metrics, "kv": record.kv, "telemetry": record.telemetry, "counters": record.counters}
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return _ABSENT
        node = node[part]
    return node


_ABSENT = object()


def relative_change(baseline: float, measured: float) -> float:
    if baseline == measured:
        return 0.0
    if baseline == 0:
        return math.copysign(math.inf, measured)
    return (measured - baseline) / abs(baseline)


@dataclass(frozen=True, slots=True)
class MetricResult:
    metric: str
    direction: Direction
    baseline: float
    measured: float | None
    change: float  # (measured - baseline) / |baseline|; NaN when missing
    tolerance: float  # relative
    verdict: Verdict
    first_measured: float | None = None  # the first run's value when this one is the re-measurement
    note: str = ""  # why a metric was not judged, or is too noisy to gate

    @property
    def name(self) -> str:
        return self.metric.rsplit(".", 1)[1]

    def produced_on(self, device: str) -> bool:
        """Whether a cell on ``device`` ("cpu", "cuda", "cuda:1") writes this metric."""
        return device.split(":")[0] in self.devices


def _unusable_baseline(rule: Rule, raw: object, spread: float) -> str | None:
    """Why the baseline's value of ``rule``'s metric cannot be judged against, or None."""
    if why := bad_number(raw):
        return f"baseline value {why}"
    if raw == 0 and rule.direction is Direction.HIGHER:
        return "baseline value is 0: nothing completed, no relative change to judge"
    if math.isnan(spread):
        return "a baseline round holds a value that is not a finite number >= 0"
    return None


def judge(rule: Rule, baseline: CellRecord, current: CellRecord, tier: str, k: float) -> MetricResult | None:
    """One metric's verdict; None when the baseline does not have the metric (nothing to compare)."""
    raw = _raw(baseline, rule.metric)
    if raw is _ABSENT:
        return None
    measured = current.value(rule.metric)
    spread = relative_spread(baseline, rule.metric)
    if why := _unusable_baseline(rule, raw, spread):
        base = float(raw) if isinstance(raw, (int, float)) else math.nan
        return MetricResult(rule.metric, rule.direction, base, measured, math.nan, math.nan, Verdict.NOT_JUDGED,
                            note=why)
    base = float(raw)  # type: ignore[arg-type]  # a finite number >= 0, checked above
    slack, cap = k * spread, rule.cap(tier)
    noisy = rule.direction is not Direction.EXACT and slack > cap
    tolerance = EXACT_REL if rule.direction is Direction.EXACT else max(rule.floor(tier), slack)
    if measured is None:
        return MetricResult(rule.metric, rule.direction, base, None, math.nan, tolerance, Verdict.MISSING)
    change = relative_change(base, measured)
    worse = {Direction.HIGHER: -change, Direction.LOWER: change, Direction.EXACT: abs(change)}[rule.direction]
    note = ""
    if worse > tolerance:  # beyond even the baseline's own noise: a regression, noisy or not
        verdict = Verdict.REGRESSION
    elif noisy:
        verdict = Verdict.NOISY
        note = f"{k:g} × the baseline's round-to-round spread is ±{slack:.0%}, above the cap of {cap:.0%}"
    elif rule.direction is not Direction.EXACT and -worse > tolerance:
        verdict = Verdict.IMPROVEMENT
    else:
        verdict = Verdict.PASS
    return MetricResult(rule.metric, rule.direction, base, measured, change, tolerance, verdict, note=note)


@dataclass(frozen=True, slots=True)
class CellVerdict:
    name: str
    verdict: Verdict
    metrics: tuple[MetricResult, ...] = ()
    identity_diff: tuple[str, ...] = ()  # why there is no comparable baseline
    versions: Mapping[str, tuple[str, str]] = field(default_factory=dict)  # upgrade axes that differ
    warnings: tuple[str, ...] = ()
    remeasured: bool = False

    @property
    def failed(self) -> bool:
        return self.verdict.failed


def _cell_verdict(results: list[MetricResult]) -> Verdict:
    """Worst first: a failure; then a metric that could not be judged; then an improvement; a pass needs them all."""
    if any(r.verdict.failed for r in results):
        return Verdict.REGRESSION
    if not results or any(r.verdict is Verdict.NOT_JUDGED for r in results):
        return Verdict.NOT_JUDGED
    if any(r.verdict is Verdict.NOISY for r in results):
        return Verdict.NOISY
    if any(r.verdict is Verdict.IMPROVEMENT for r in results):
        return Verdict.IMPROVEMENT
    return Verdict.PASS


def compare_cell(
    name: str,
    baseline: CellRecord | None,
    current: CellRecord,
    config: GateConfig = GateConfig(),
    baseline_fp: Fingerprint | None = None,
    current_fp: Fingerprint | None = None,
) -> CellVerdict:
    """Compare one cell with its baseline; never compares across a mismatched identity."""
    if baseline is None:
        return CellVerdict(name, Verdict.NO_BASELINE, identity_diff=("no baseline entry for this cell",))
    diffs: list[str] = []
    if baseline_fp is not None and current_fp is not None:
        diffs += [f"hardware.{d}" for d in identity_diff(baseline_fp.identity.to_dict(), current_fp.identity.to_dict())]
    diffs += identity_diff(cell_identity(baseline), cell_identity(current))
    if diffs:
        return CellVerdict(name, Verdict.NO_BASELINE, identity_diff=tuple(diffs))
    tier = current.tier
    results = [r for rule in config.rules if (r := judge(rule, baseline, current, tier, config.k)) is not None]
    versions, warnings = {}, ()
    if baseline_fp is not None and current_fp is not None:
        versions = version_diff(baseline_fp.upgrade, current_fp.upgrade)
        warnings = tuple(soft_warnings(baseline_fp.soft, current_fp.soft))
    why = () if results else ("the baseline has none of the gated metrics",)
    return CellVerdict(name, _cell_verdict(results), tuple(results), why, versions, warnings)


def confirm(first: CellVerdict, second: CellVerdict) -> CellVerdict:
    """Combine a first violation with its re-measurement: a metric fails only if it failed both times."""
    if first.verdict is Verdict.NO_BASELINE or second.verdict is Verdict.NO_BASELINE:
        return replace(second, remeasured=True)
    before = {r.metric: r for r in first.metrics}
    merged = []
    for r in second.metrics:
        prior = before.get(r.metric)
        verdict = r.verdict
        if verdict.failed and not (prior is not None and prior.verdict.failed):
            verdict = Verdict.PASS  # failed only once: noise, not a confirmed regression
        merged.append(replace(r, verdict=verdict, first_measured=prior.measured if prior else None))
    return replace(second, verdict=_cell_verdict(merged), metrics=tuple(merged), remeasured=True)


# --- the one table --------------------------------------------------------------------------------


def fmt_value(value: float | None) -> str:
    if value is None or math.isnan(value):
        return "-"
    if abs(value) >= 1e5:
        return f"{value:,.0f}"
    return f"{value:.4g}"


def fmt_change(change: float) -> str:
    if math.isnan(change):
        return "-"
    if math.isinf(change):
        return "+inf" if change > 0 else "-inf"
    return f"{change * 100:+.1f}%"


def fmt_tolerance(r: MetricResult) -> str:
    if r.direction is Direction.EXACT:
        return "exact"
    if math.isnan(r.tolerance):
        return "-"
    return f"{'-' if r.direction is Direction.HIGHER else '+'}{r.tolerance * 100:.1f}%"


TABLE_HEADER = ("metric", "baseline", "measured", "change", "tolerance", "verdict")


def table_rows(verdict: CellVerdict) -> list[tuple[str, ...]]:
    rows = []
    for r in verdict.metrics:
        measured = fmt_value(r.measured)
        if r.first_measured is not None:
            measured += f" (1st {fmt_value(r.first_measured)})"
        label = {Verdict.IMPROVEMENT: "improvement", Verdict.PASS: "ok", Verdict.NOISY: "TOO NOISY",
                 Verdict.NOT_JUDGED: "NOT JUDGED"}.get(r.verdict, r.verdict.value.upper())
        rows.append((r.name, fmt_value(r.baseline), measured, fmt_change(r.change), fmt_tolerance(r), label))
    return rows


def render_table(verdict: CellVerdict) -> str:
    """The failure message: one aligned table, then the upgrade-axis versions that differ."""
    rows = [TABLE_HEADER, *table_rows(verdict)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(TABLE_HEADER))]
    lines = [f"batchperf gate: {verdict.name}: {verdict.verdict.value.upper()}"
             + (" (confirmed by a re-measurement)" if verdict.remeasured and verdict.failed else "")]
    for i, row in enumerate(rows):
        lines.append("  ".join(c.ljust(w) if j == 0 else c.rjust(w) for j, (c, w) in enumerate(zip(row, widths))))
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    lines += [f"{m.name}: {m.note}" for m in verdict.metrics if m.note]
    if verdict.versions:
        lines.append("versions that differ from the baseline: "
                     + ", ".join(f"{k} {a} → {b}" for k, (a, b) in verdict.versions.items()))
    lines += [f"note: {w}" for w in verdict.warnings]
    return "\n".join(lines)
