"""The metric catalogue: one entry per number a cell stores, and every table of metrics derived from it.

An entry names where the number lives in a cell record (``metrics.p99_ttft_ms``: the section, then the
key), its unit, which way is better, a help text, the name vLLM gives it (``vllm bench serve``'s JSON key
or an engine metric), the OpenMetrics family it is exported as, and how the gate judges it. The gate's rules
(:data:`GATED`), the history's series (:data:`TRACKED`), the export's families, ``batchperf ab``'s default
deciding metrics (:data:`AB_DEFAULT`), the GPU check's A/A metrics and the summary columns (:data:`SUMMARY`)
are all read from here; ``tests/measure/test_catalogue.py`` holds the catalogue to what a cell stores.

Adding a metric: write it where it is measured, add its entry here (with a tolerance if the gate should
judge it, ``tracked`` for the history, ``export`` for OpenMetrics). Nothing else changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum

from batchperf.measure.counters import BY_NAME as COUNTER_BY_NAME
from batchperf.measure.counters import COUNTERS
from batchperf.measure.devices import DEVICE_TYPES
from batchperf.measure.metrics import LATENCY_FAMILIES
from batchperf.measure.slo import TENANT_STATS

# the measured sections of a cell record, and the workload's own numbers (its load factor, expected hit rate): the one
# list of them (results.record adds the cell's own "cell" and "model")
METRIC_SECTIONS = ("metrics", "kv", "telemetry", "counters", "efficiency", "client", "workload", "slo", "tenants",
                   "capacity", "policy")
# a section of one block per tenant ({tenant: {key: value}}): its entries' path ``tenants.KEY`` names KEY in every
# tenant's block, exported with a ``tenant`` label, gated per tenant
PER_TENANT = "tenants"


class Direction(str, Enum):
    HIGHER = "higher"  # higher is better (throughput)
    LOWER = "lower"  # lower is better (latency, memory)
    EXACT = "exact"  # any change is a regression (KV bytes)
    NONE = "none"  # a setting or a count, neither better nor worse (block size, samples taken)


@dataclass(frozen=True, slots=True)
class Tolerance:
    """How the gate judges a metric: ``max(floor, k × the baseline's spread)``, at most ``cap`` (per tier)."""

    floors: Mapping[str, float] = field(default_factory=dict)  # tier -> relative floor; "*" for any tier
    caps: Mapping[str, float] = field(default_factory=dict)  # tier -> the most k × spread may give
    tiers: tuple[str, ...] | None = None  # the tiers it is judged on; None: every tier
    reported: tuple[str, ...] = ()  # tiers where it is judged and shown, but does not decide the cell's verdict
    # True: floors and caps are in the metric's own unit and the change is measured - baseline (a ratio's
    # 0.05 is 5 percentage points: SLO attainment), not relative to the baseline
    absolute: bool = False

    def __post_init__(self) -> None:
        for kind, values in (("floor", self.floors), ("cap", self.caps)):
            for tier, value in values.items():
                if not 0 <= value < 10:
                    raise ValueError(f"tolerance: {kind} for tier {tier!r} must be in [0, 10), got {value}")
        if self.tiers is not None:
            if not self.tiers:
                raise ValueError("tolerance: tiers must name at least one tier, or be None for every tier")
            if missing := [t for t in self.tiers if t not in self.floors]:
                raise ValueError(f"tolerance: no floor for the tier(s) it is judged on: {', '.join(missing)}")


EXPORT_UNITS = ("seconds", "bytes", "joules", "ratio")  # OpenMetrics units a family name may end with


@dataclass(frozen=True, slots=True)
class Metric:
    path: str  # section.key in a cell record, e.g. "metrics.output_throughput"
    unit: str  # what the stored number counts, e.g. "tokens/s", "ms", "bytes"
    direction: Direction
    help: str
    vllm: str = ""  # vLLM's name for it ("" when vLLM has none)
    export: str = ""  # the OpenMetrics family, without the batchperf_ prefix ("" = not exported)
    labels: Mapping[str, str] = field(default_factory=dict)  # this entry's labels within its family
    family_help: str = ""  # the family's help when several entries share it ("" = this entry's help)
    scale: float = 1.0  # stored value × scale = exported value (ms -> s)
    tolerance: Tolerance | None = None  # None: the gate does not judge it
    devices: tuple[str, ...] = DEVICE_TYPES  # where a cell writes it (torch's CUDA peaks: only on "cuda")
    backends: tuple[str, ...] | None = None  # the backends whose cells write it; None: every backend
    workloads: tuple[str, ...] | None = None  # the workload kinds whose cells write it; None: every kind
    tracked: bool = False  # a history series (batchperf history)
    # a single-valued metric's stored 1-sd relative spread (a capacity search's), which the gate reads in place of
    # the round-to-round spread such a metric has none of ("" = the rounds')
    spread: str = ""
    column: str = ""  # its column in the end-of-session summary ("" = none)
    fmt: str = ".4g"  # how the summary writes it
    signed: bool = False  # may be negative (a fitted coefficient); every other measured number is >= 0

    def __post_init__(self) -> None:
        section, _, key = self.path.partition(".")
        if section not in METRIC_SECTIONS or not key or "." in key:
            raise ValueError(f"metric path {self.path!r} must be SECTION.KEY with SECTION one of "
                             f"{', '.join(METRIC_SECTIONS)}")
        if not self.devices or not set(self.devices) <= set(DEVICE_TYPES):
            raise ValueError(f"metric {self.path}: devices must be some of {', '.join(DEVICE_TYPES)}, "
                             f"got {self.devices}")
        if self.backends is not None and not self.backends:
            raise ValueError(f"metric {self.path}: backends must name at least one backend, or be None for all")
        if self.tolerance is not None and self.direction is Direction.NONE:
            raise ValueError(f"metric {self.path}: a gated metric needs a direction")

    @property
    def name(self) -> str:
        return self.path.partition(".")[2]

    @property
    def section(self) -> str:
        return self.path.partition(".")[0]

    @property
    def keys(self) -> tuple[str, ...]:
        """Where it lives in a cell record, as keys: ``("metrics", "output_throughput")``."""
        return self.section, self.name

    def tenant_keys(self, tenant: str) -> tuple[str, ...]:
        """Where one tenant's value of a per-tenant entry lives: the tenant's name is a key of its own, so a name
        with a dot in it (``chat.v2``) is read like any other."""
        return self.section, tenant, self.name

    @property
    def gated(self) -> bool:
        return self.tolerance is not None

    @property
    def export_unit(self) -> str:
        """The OpenMetrics unit of its family: the name's unit suffix, if it has one."""
        suffix = self.export.rsplit("_", 1)[-1]
        return suffix if suffix in EXPORT_UNITS else ""

    @property
    def absolute(self) -> bool:
        """Judged by its absolute change (percentage points of a ratio), not a relative one."""
        return self.tolerance is not None and self.tolerance.absolute

    @property
    def per_tenant(self) -> bool:
        return self.section == PER_TENANT

    def floor(self, tier: str) -> float:
        if self.direction is Direction.EXACT or self.tolerance is None:
            return 0.0
        floors = self.tolerance.floors
        return floors.get(tier, floors.get("*", 0.0))

    def judged_on(self, tier: str) -> bool:
        """Whether the gate judges it on ``tier`` at all (deciding or reported)."""
        return self.tolerance is not None and (self.tolerance.tiers is None or tier in self.tolerance.tiers)

    def decides(self, tier: str) -> bool:
        """Whether its verdict decides a cell's on ``tier``; False where it is reported only."""
        return self.judged_on(tier) and tier not in self.tolerance.reported  # type: ignore[union-attr]

    def cap(self, tier: str) -> float:
        """The most tolerance the baseline's spread may buy; a floor raised above it raises it too."""
        caps = self.tolerance.caps if self.tolerance is not None else {}
        return max(caps.get(tier, caps.get("*", 0.0)), self.floor(tier))

    def produced_on(self, device: str, backend: str | None = None, workload: str | None = None) -> bool:
        """Whether a cell on ``device`` ("cpu", "cuda", "cuda:1") of ``backend`` running a ``workload`` kind
        (None: any) writes this metric."""
        return device.split(":")[0] in self.devices and (
            backend is None or self.backends is None or backend in self.backends) and (
            workload is None or self.workloads is None or workload in self.workloads)


# --- tolerances --------------------------------------------------------------------------------------------------
# CPU-tier floors come from A/A reruns on a quiet 2-core VM, one torch thread (tools/detector_check.py,
# docs/baselines.md). How much a cell wanders from run to run depends on the cell: a compute-bound cell
# (hf-static bs8 p512 c16) stays within +-6% across processes; a dispatch-bound one (bs4 p64: tiny matmuls,
# Python and op-dispatch overhead) spans 18-29% between processes. The throughput floor is set for the steady
# cells (15%: above their worst A/A first measurement, -12.7%, below the -22%..-46% a 30% slower forward pass
# cost them); a noisy cell gets its wider tolerance from k x its own round-to-round spread in a baseline pooled
# from several runs (batchperf refresh --repeat). Tail latencies keep wide floors: P99 over 16 requests moves
# far more than throughput, and P99 ITL (the few slowest of ~370 token gaps: any OS hiccup) moved +66% and
# +88% in one A/A run, so on the CPU tier it only catches gross stalls (150%).
# GPU floors (the "gpu" tier) are PROVISIONAL: no session that wrote them had a GPU; ci/gpu_check.sh measures what
# they must stand above (docs/gpu.md, "The first GPU run"). Throughput 5%, the low end of the 5-10% a dedicated,
# clock-steady card allows: every miss is re-run at once and fails only if confirmed, so a floor near the A/A
# spread costs little in false alarms, and a wider one would let a 5% slower forward pass (-4.8% throughput) and
# more hide under it. Latencies: P50 TTFT, TPOT and E2EL decide at 15% until measured (a median over a GPU
# cell's requests is steady, but no A/A has shown how steady); P99 latencies are judged and reported, never
# deciding, on the GPU tier (a handful of slow requests: the tail of a 32-request cell is its one or two slowest).
# Pin each from the check's "suggested floor" and say here which GPU, driver and date it came from.
# Caps: the most slack k x spread may buy. A throughput tolerance of 40% lets a 1.67x slowdown through; a
# baseline noisier than that cannot tell a 30% slower forward pass (-22..-28% throughput) from noise, so its
# cell reports itself too noisy to gate rather than pass. Tails get twice their floor (TPOT 1.0, ITL its
# floor); the GPU caps are three times the GPU floors. docs/baselines.md says what they do to the committed
# CPU baseline.
THROUGHPUT = Tolerance({"cpu": 0.15, "gpu": 0.05, "*": 0.10}, {"cpu": 0.40, "gpu": 0.15, "*": 0.30})
GPU_REPORTED = ("gpu",)  # the tiers where P99 latencies are judged and reported, not deciding
TAIL = Tolerance({"cpu": 0.40, "gpu": 0.10, "*": 0.15}, {"cpu": 0.80, "gpu": 0.30, "*": 0.45},
                 reported=GPU_REPORTED)  # P99 TTFT, E2EL
STEP = Tolerance({"cpu": 0.60, "gpu": 0.10, "*": 0.15}, {"cpu": 1.00, "gpu": 0.30, "*": 0.45},
                 reported=GPU_REPORTED)  # P99 TPOT
GAP = Tolerance({"cpu": 1.50, "gpu": 0.15, "*": 0.20}, {"cpu": 1.50, "gpu": 0.45, "*": 0.60},
                reported=GPU_REPORTED)  # P99 ITL
# P50 latencies decide on the GPU tier only (the CPU tier gates its P99s); P99s are reported, not deciding, there
MEDIAN = Tolerance({"gpu": 0.15}, {"gpu": 0.45}, tiers=("gpu",))  # P50 TTFT, TPOT, E2EL
EXACT = Tolerance()  # exact metrics have no tolerance: any change beyond float rounding is a regression
# the backends that measure the KV bytes each request held (vllm-server's client cannot see the server's cache)
KV_MEASURED = ("hf-static", "continuous", "hf-continuous", "vllm", "vllm-prefix-cache")
SCHEDULERS = ("continuous", "vllm", "vllm-prefix-cache", "vllm-server")  # the backends that can preempt
CUDA = ("cuda",)

# --- metrics: vllm bench serve's names and definitions (batchperf.measure.metrics) ------------------------------

LATENCY_HELP = {"ttft": "time to first token, from the client's send time",
             "tpot": "time per output token after the first, per request",
             "itl": "inter-token latency, every gap pooled",
             "e2el": "end-to-end request latency",
             "send_delay": "the client's own time from a free slot to the send (batchperf's own)",
             "send_lag": "how late an open-loop request was sent: sent - its scheduled time (batchperf's own)"}
STATS = ("mean", "median", "std", "p50", "p90", "p99")
EXPORTED_STATS = ("mean", "median", "p90", "p99", "std")  # p50 is the median: exported once
GATED_TAILS = {"ttft": TAIL, "tpot": STEP, "itl": GAP, "e2el": TAIL}  # their P99 is gated
GATED_MEDIANS = ("ttft", "tpot", "e2el")  # their P50 is gated on the GPU tier (MEDIAN)
TRACKED_LATENCIES = ("mean_ttft_ms", "p99_ttft_ms", "p99_tpot_ms", "p99_itl_ms", "p99_e2el_ms")


def _latency(stat: str, family: str) -> Metric:
    key = f"{stat}_{family}_ms"
    exported = family in LATENCY_FAMILIES and stat in EXPORTED_STATS
    return Metric(
        f"metrics.{key}", "ms", Direction.LOWER, f"{stat} {LATENCY_HELP[family]}",
        vllm=key if family in LATENCY_FAMILIES else "",
        export=f"{family}_seconds" if exported else "", labels={"stat": stat} if exported else {},
        scale=1e-3 if exported else 1.0,
        family_help=f"{LATENCY_HELP[family]} (stat: {', '.join(EXPORTED_STATS)})" if exported else "",
        tolerance=GATED_TAILS.get(family) if stat == "p99" else MEDIAN if stat == "p50" and family in GATED_MEDIANS
        else None, tracked=key in TRACKED_LATENCIES,
        column={"p99_e2el_ms": "P99 E2EL ms", "mean_ttft_ms": "mean TTFT ms"}.get(key, ""), fmt=".1f")


RUN_METRICS: tuple[Metric, ...] = (
    Metric("metrics.output_throughput", "tokens/s", Direction.HIGHER, "output tokens per second",
           vllm="output_throughput", export="output_throughput_tokens_per_second", tolerance=THROUGHPUT,
           tracked=True, column="out tok/s", fmt=".1f"),
    Metric("metrics.request_throughput", "requests/s", Direction.HIGHER, "requests completed per second",
           vllm="request_throughput", export="request_throughput_requests_per_second", tolerance=THROUGHPUT,
           tracked=True),
    Metric("metrics.total_token_throughput", "tokens/s", Direction.HIGHER, "input and output tokens per second",
           vllm="total_token_throughput", export="total_token_throughput_tokens_per_second"),
    Metric("metrics.duration", "s", Direction.NONE, "wall time of a measured round", vllm="duration",
           export="duration_seconds"),
    Metric("metrics.completed", "requests", Direction.NONE, "requests completed in a round", vllm="completed",
           export="completed_requests"),
    Metric("metrics.failed", "requests", Direction.LOWER, "requests failed in a round", vllm="failed",
           export="failed_requests"),
    Metric("metrics.total_input_tokens", "tokens", Direction.NONE, "prompt tokens sent in a round",
           vllm="total_input_tokens", export="input_tokens"),
    Metric("metrics.total_output_tokens", "tokens", Direction.NONE, "tokens generated in a round",
           vllm="total_output_tokens", export="output_tokens"),
    *(_latency(stat, family) for family in LATENCY_HELP for stat in STATS),
    *(Metric(f"metrics.n_{family}", "samples", Direction.NONE, f"samples behind the {family} statistics",
             column="n" if family == "e2el" else "", fmt="d") for family in LATENCY_HELP),
)

# --- KV cache (batchperf.measure.kv and each backend's own figures) ------------------------------------------------

KV_METRICS: tuple[Metric, ...] = (
    Metric("kv.bytes_per_token_analytic", "bytes", Direction.EXACT,
           "KV-cache bytes per token: 2 x layers x kv_heads x head_dim x dtype bytes",
           export="kv_cache_analytic_per_token_bytes"),
    Metric("kv.bytes_per_token_measured", "bytes", Direction.EXACT, "KV-cache bytes per token the backend held",
           export="kv_cache_measured_per_token_bytes", tolerance=EXACT, backends=KV_MEASURED, column="KV B/tok",
           fmt=",.0f"),
    Metric("kv.kv_bytes_per_request_mean", "bytes", Direction.EXACT, "KV-cache bytes a request held (mean)",
           export="kv_cache_per_request_bytes", tolerance=EXACT, backends=KV_MEASURED, tracked=True,
           column="KV B/req", fmt=",.0f"),
    Metric("kv.kv_bytes_per_request_analytic_mean", "bytes", Direction.EXACT,
           "analytic KV-cache bytes of a request's prompt and output tokens (mean)"),
    Metric("kv.kv_tokens_per_request_mean", "tokens", Direction.NONE, "tokens a request held in the KV cache (mean)"),
    Metric("kv.kv_cache_peak_bytes", "bytes", Direction.LOWER, "the backend's own KV-cache peak",
           export="kv_cache_peak_bytes"),
    Metric("kv.bytes_per_token_backend", "bytes", Direction.EXACT, "KV bytes per token by the backend's own layout"),
    Metric("kv.bytes_per_block", "bytes", Direction.NONE, "bytes of one KV block (paged backends)"),
    Metric("kv.block_size", "tokens", Direction.NONE, "tokens per KV block (paged backends)"),
    Metric("kv.num_blocks", "blocks", Direction.NONE, "KV blocks in the pool (continuous)"),
    Metric("kv.pool_bytes", "bytes", Direction.NONE, "bytes of the KV pool (continuous)"),
    Metric("kv.kv_pool_blocks", "blocks", Direction.NONE, "KV blocks in the pool (hf-continuous, vllm)"),
    Metric("kv.max_batch_tokens", "tokens", Direction.NONE, "tokens per step the engine allows (hf-continuous)"),
    Metric("kv.preemptions", "requests", Direction.LOWER, "requests the engine preempted (its own count)"),
    Metric("kv.server_max_model_len", "tokens", Direction.NONE, "a given server's max_model_len (/v1/models)",
           backends=("vllm-server",)),
    Metric("kv.server_max_num_seqs", "requests", Direction.NONE,
           "a given server's max_num_seqs (/server_info, development mode only)", backends=("vllm-server",)),
)

# --- telemetry (batchperf.telemetry.sampler) ------------------------------------------------------------------------

TELEMETRY_METRICS: tuple[Metric, ...] = (
    # RSS counts the whole process (the interpreter, torch, every model loaded so far) and allocator
    # caches that earlier cells left behind, so it depends on what ran before in the session even
    # when sampled per cell: only a gross change means something.
    Metric("telemetry.cell_peak_rss_bytes", "bytes", Direction.LOWER, "largest process RSS sampled in the cell",
           export="cell_peak_rss_bytes", tolerance=Tolerance({"*": 0.50})),
    Metric("telemetry.process_peak_rss_bytes", "bytes", Direction.LOWER, "the process's RSS high-water mark"),
    Metric("telemetry.samples", "samples", Direction.NONE, "telemetry samples taken in the round"),
    Metric("telemetry.interval_s", "s", Direction.NONE, "the sampling interval"),
    Metric("telemetry.duration_s", "s", Direction.NONE, "the sampled span of the round"),
    Metric("telemetry.sampler_cpu_s", "s", Direction.LOWER, "CPU time the sampler thread itself used"),
    Metric("telemetry.cpu_s", "s", Direction.LOWER, "CPU time of the process tree in the round (user + system; "
           "a server kept across processes included; the sampler's own excluded)"),
    # CPU time cannot see waits: beside wall-clock throughput it tells hidden work (CPU worse, wall the same) from
    # a wait or lost overlap (wall worse, CPU the same). A cell keeps its median over the rounds but no spread, so
    # the floor is the whole tolerance. Between processes CPU time moves as wall time does (a dispatch-bound CPU
    # cell spans 18-29%), so on the CPU tier it only catches gross hidden work (40%, the tails' floor, sized when a
    # cell kept one round's figure); GPU: 10%.
    Metric("telemetry.cpu_seconds_per_output_token", "s/token", Direction.LOWER,
           "CPU seconds of the process tree (a vLLM engine or server it started, or a kept server it used, included) "
           "per output token",
           export="cpu_per_output_token_seconds", tolerance=Tolerance({"cpu": 0.40, "gpu": 0.10, "*": 0.15}),
           tracked=True),
    # a soft fact, never gated: the machine busy with other work (batchperf.telemetry.runqueue); the gate's note on a
    # regression reads it against the baseline's (batchperf.regress.machine)
    Metric("telemetry.cpu_wait_share", "ratio", Direction.NONE,
           "share of the process tree's runnable time its threads waited for a CPU (Linux schedstat)"),
    Metric("telemetry.torch_peak_allocated_bytes", "bytes", Direction.LOWER, "torch's CUDA peak allocated",
           export="torch_peak_allocated_bytes", tolerance=Tolerance({"*": 0.05}), devices=CUDA),
    Metric("telemetry.torch_peak_reserved_bytes", "bytes", Direction.LOWER, "torch's CUDA peak reserved",
           devices=CUDA),
    Metric("telemetry.gpu_memory_used_peak_bytes", "bytes", Direction.LOWER, "GPU memory used, peak (NVML)",
           devices=CUDA),
    Metric("telemetry.gpu_memory_used_mean_bytes", "bytes", Direction.LOWER, "GPU memory used, mean (NVML)",
           devices=CUDA),
    Metric("telemetry.gpu_util_mean_pct", "%", Direction.NONE, "GPU utilisation, mean (NVML)", devices=CUDA),
    Metric("telemetry.gpu_util_peak_pct", "%", Direction.NONE, "GPU utilisation, peak (NVML)", devices=CUDA),
    Metric("telemetry.power_mean_w", "W", Direction.LOWER, "GPU power, mean (NVML)", devices=CUDA),
    Metric("telemetry.power_peak_w", "W", Direction.LOWER, "GPU power, peak (NVML)", devices=CUDA),
    Metric("telemetry.energy_j", "J", Direction.LOWER, "GPU energy in the round (NVML)", devices=CUDA),
    Metric("telemetry.joules_per_output_token", "J/token", Direction.LOWER, "GPU energy (NVML) per output token",
           export="gpu_energy_per_output_token_joules", devices=CUDA),
    # clocks and temperature: soft facts, never gated; a clock drop beyond 7% or a thermal or hardware-slowdown
    # throttle voids the cell instead (batchperf.telemetry.gpu_clocks)
    Metric("telemetry.sm_clock_start_mhz", "MHz", Direction.NONE, "SM clock at the cell's first sample (NVML)",
           devices=CUDA),
    Metric("telemetry.sm_clock_mean_mhz", "MHz", Direction.NONE, "SM clock, mean (NVML)", devices=CUDA),
    Metric("telemetry.sm_clock_min_mhz", "MHz", Direction.NONE, "SM clock, lowest (NVML)", devices=CUDA),
    Metric("telemetry.sm_clock_drop", "ratio", Direction.NONE,
           "the SM clock's largest fall from an earlier busy peak in the cell (NVML; idle samples left out)",
           devices=CUDA),
    Metric("telemetry.temperature_mean_c", "°C", Direction.NONE, "GPU temperature, mean (NVML)", devices=CUDA),
    Metric("telemetry.temperature_peak_c", "°C", Direction.NONE, "GPU temperature, highest (NVML)", devices=CUDA),
)

# --- engine counters (batchperf.measure.counters: their names, units and help are kept there) ----------------------


def _counter(name: str, direction: Direction, export: str, tolerance: Tolerance | None = None,
             backends: tuple[str, ...] | None = None, column: str = "", fmt: str = ".4g",
             workloads: tuple[str, ...] | None = None) -> Metric:
    c = COUNTER_BY_NAME[name]
    return Metric(f"counters.{name}", c.unit, direction, c.help, vllm=c.vllm, export=export, tolerance=tolerance,
                  backends=backends, column=column, fmt=fmt, workloads=workloads)


COUNTER_METRICS: tuple[Metric, ...] = (
    # Counters count what the scheduler did, not time, so their floors only absorb scheduling that moves with the
    # machine's speed. From none to some preemptions is always a regression (the KV budget no longer holds).
    _counter("num_preemptions", Direction.LOWER, "engine_preemptions", Tolerance({"*": 0.25}), SCHEDULERS,
             column="preempt", fmt=".3g"),
    _counter("prefix_cache_queries", Direction.NONE, "engine_prefix_cache_queries_tokens"),
    _counter("prefix_cache_hits", Direction.HIGHER, "engine_prefix_cache_hits_tokens"),
    # Measured beside the workload's expected rate (workload.expected_prefix_hit_rate): a hidden change that turns
    # prefix caching off, or breaks block sharing, drops it to 0. It counts tokens, not time: a floor of 5% (relative)
    # absorbs a request or two scheduled differently (a hit lost when two of a group are admitted in other steps).
    # Only where the workload shares prefixes (batchperf.workload.traffic.shared_prefix_counters) and the engine has a
    # prefix cache (batchperf's engine shares no blocks: its hits are 0, the rate absent with that reason).
    _counter("prefix_cache_hit_rate", Direction.HIGHER, "engine_prefix_cache_hit_ratio", Tolerance({"*": 0.05}),
             ("vllm", "vllm-prefix-cache", "vllm-server"),
             workloads=("prefix", "trace")),
    _counter("kv_cache_usage_perc", Direction.NONE, "engine_kv_cache_usage_peak_ratio"),
    _counter("num_requests_running", Direction.NONE, "engine_requests_running_peak"),
    _counter("num_requests_waiting", Direction.NONE, "engine_requests_waiting_peak"),
    _counter("engine_steps", Direction.NONE, "engine_steps"),
    _counter("iteration_tokens_mean", Direction.NONE, "engine_step_tokens_mean"),
    _counter("num_requests_running_mean", Direction.NONE, "engine_step_requests_mean"),
    # Static batches: the share of computed token slots that were padding or discarded decoding.
    _counter("padding_waste", Direction.LOWER, "engine_padding_waste_ratio", Tolerance({"*": 0.05}), ("hf-static",)),
    _counter("request_prefill_time_seconds", Direction.LOWER, "engine_request_prefill_seconds"),
    _counter("request_decode_time_seconds", Direction.LOWER, "engine_request_decode_seconds"),
)

# --- efficiency (batchperf.measure.efficiency) ------------------------------------------------------------------

EFFICIENCY_METRICS: tuple[Metric, ...] = (
    Metric("efficiency.decode_mbu", "ratio", Direction.HIGHER, "decode memory-bandwidth utilisation", devices=CUDA),
    Metric("efficiency.prefill_mfu", "ratio", Direction.HIGHER, "prefill model-FLOPs utilisation", devices=CUDA),
    Metric("efficiency.decode_bandwidth_bytes_per_s", "bytes/s", Direction.HIGHER, "decode bytes moved per second"),
    Metric("efficiency.prefill_flops_per_s", "FLOP/s", Direction.HIGHER, "prefill FLOPs per second"),
    Metric("efficiency.peak_bandwidth_bytes_per_s", "bytes/s", Direction.NONE, "the device's peak bandwidth",
           devices=CUDA),
    Metric("efficiency.peak_flops_per_s", "FLOP/s", Direction.NONE, "the device's peak FLOPs at the dtype",
           devices=CUDA),
    Metric("efficiency.decode_steps", "steps", Direction.NONE, "decode steps behind decode_mbu"),
    Metric("efficiency.prefill_steps", "steps", Direction.NONE, "prefill steps behind prefill_mfu"),
)

# --- the client-lag check of a server cell (batchperf.measure.client_lag; docs/measurement.md) ---------------------

SERVER = ("vllm-server",)


def _client(name: str, unit: str, help: str) -> Metric:
    return Metric(f"client.{name}", unit, Direction.NONE, help, backends=SERVER)


CLIENT_METRICS: tuple[Metric, ...] = (
    _client("loop_lag_mean_ms", "ms", "how late the client's event-loop timer fired, mean (median of rounds)"),
    _client("loop_lag_p99_ms", "ms", "how late the client's event-loop timer fired, P99 (worst round)"),
    _client("loop_lag_max_ms", "ms", "how late the client's event-loop timer fired, at most (worst round)"),
    _client("loop_lag_samples", "samples", "timer firings behind the loop-lag figures"),
    _client("loop_stalls", "stalls",
            "event-loop stalls over 10 ms with a request in flight: each marks the round client-bound (worst round)"),
    _client("delayed_requests", "requests",
            "requests in flight during those stalls, read late (worst round; their ids in client.stalls)"),
    _client("server_mean_ttft_ms", "ms", "mean TTFT as the server timed it (vllm:time_to_first_token_seconds)"),
    _client("server_mean_e2el_ms", "ms", "mean E2E latency as the server timed it (vllm:e2e_request_latency_seconds)"),
    _client("server_mean_queue_ms", "ms", "mean time queued in the server (vllm:request_queue_time_seconds)"),
    _client("server_mean_tpot_ms", "ms",
            "mean time per output token as the server timed it (vllm:request_time_per_output_token_seconds)"),
    _client("server_requests", "requests", "requests the server's E2E histogram counted during the run"),
    _client("client_mean_ttft_ms", "ms", "the client's mean TTFT beside the server's (median of rounds)"),
    _client("client_mean_e2el_ms", "ms", "the client's mean E2E latency beside the server's (median of rounds)"),
    _client("ttft_client_excess_ms", "ms", "client mean TTFT minus the server's: network, HTTP and client delay"),
    _client("e2el_client_excess_ms", "ms", "client mean E2E latency minus the server's"),
    _client("server_occupancy", "ratio",
            "the server's E2E time over duration x requests it could run (>= 1: a full batch on average)"),
)

# --- SLO attainment, goodput, fairness (batchperf.measure.slo), overall and per tenant -----------------------------
# Attainment is a ratio judged in percentage points (absolute): a drop of more than the floor is a regression.
# PROVISIONAL floors, not yet A/A-measured: on the CPU tier a cell offers ~16 requests, so one request is ~6 points
# and a tight TTFT SLO flips with the machine's load; 15 points there, 5 on a GPU. Set them from A/A runs of the
# tenant cells (tools/detector_check.py) and say here which runs. Per tenant: fewer requests, so wider (20 / 8).
ATTAINMENT = Tolerance({"cpu": 0.15, "gpu": 0.05, "*": 0.10}, {"cpu": 0.30, "gpu": 0.15, "*": 0.20}, absolute=True)
TENANT_ATTAINMENT = Tolerance({"cpu": 0.20, "gpu": 0.08, "*": 0.15}, {"cpu": 0.40, "gpu": 0.20, "*": 0.30},
                              absolute=True)

SLO_METRICS: tuple[Metric, ...] = (
    Metric("slo.attainment", "ratio", Direction.HIGHER, "requests meeting all their tenant's SLOs / requests offered "
           "(a failed, cut-off or refused request is a miss)", export="slo_attainment_ratio", tolerance=ATTAINMENT,
           tracked=True, column="SLO att", fmt=".0%"),
    Metric("slo.request_goodput", "requests/s", Direction.HIGHER, "requests meeting all their tenant's SLOs per second",
           vllm="request_goodput", export="request_goodput_requests_per_second", tracked=True),
    Metric("slo.offered", "requests", Direction.NONE, "requests the workload offered in a round",
           export="offered_requests"),
    Metric("slo.met", "requests", Direction.NONE, "requests that met all their tenant's SLOs in a round"),
    Metric("slo.tenant_count", "tenants", Direction.NONE, "tenants in the workload (1: no tenants)"),
    Metric("slo.jain_fairness", "ratio", Direction.HIGHER, "Jain's index of the tenants' service rates while "
           "backlogged (VTC-weighted tokens; 1 = equal, 1/n = one tenant got it all)",
           export="tenant_jain_fairness_ratio"),
    Metric("slo.max_service_gap_tokens", "tokens", Direction.LOWER, "largest difference in service (VTC-weighted "
           "tokens) between two tenants over an interval both were backlogged", export="tenant_max_service_gap_tokens"),
    Metric("slo.starved_tenants", "tenants", Direction.LOWER, "tenants starved in some round: overtaken (backlogged, "
           "no token, while later arrivals of another tenant were served) for >= 5 s and half the run (> 0 fails the "
           "cell; measure.slo)",
           export="starved_tenants"),
)


def _tenant_latency(stat: str, family: str) -> Metric:
    return Metric(f"tenants.{stat}_{family}_ms", "ms", Direction.LOWER, f"{stat} {LATENCY_HELP[family]}, of one tenant",
                  vllm=f"{stat}_{family}_ms", export=f"tenant_{family}_seconds", labels={"stat": stat}, scale=1e-3,
                  family_help=f"{LATENCY_HELP[family]}, per tenant (stat: {', '.join(TENANT_STATS)})")


def _tenant_metrics() -> tuple[Metric, ...]:
    return (
        Metric("tenants.attainment", "ratio", Direction.HIGHER, "one tenant's requests meeting its SLOs / its "
               "requests offered", export="tenant_slo_attainment_ratio", tolerance=TENANT_ATTAINMENT),
        Metric("tenants.request_goodput", "requests/s", Direction.HIGHER, "one tenant's requests meeting its SLOs "
               "per second", export="tenant_request_goodput_requests_per_second"),
        Metric("tenants.offered", "requests", Direction.NONE, "one tenant's requests offered in a round"),
        Metric("tenants.met", "requests", Direction.NONE, "one tenant's requests meeting its SLOs in a round"),
        Metric("tenants.service_tokens", "tokens", Direction.NONE, "VTC-weighted tokens delivered to one tenant "
               "(1 per prompt token, 2 per output token)", export="tenant_service_tokens"),
        Metric("tenants.completed", "requests", Direction.NONE, "one tenant's requests completed in a round"),
        Metric("tenants.longest_unserved_s", "s", Direction.LOWER, "one tenant's longest window backlogged with no "
               "token while later arrivals of another tenant were served (worst round)",
               export="tenant_longest_unserved_seconds"),
        Metric("tenants.starved", "flag", Direction.LOWER, "1 when the tenant was starved in some round "
               "(longest_unserved_s >= 5 s and half the run), else 0"),
        Metric("tenants.output_throughput", "tokens/s", Direction.HIGHER, "one tenant's output tokens per second",
               export="tenant_output_throughput_tokens_per_second"),
        *(_tenant_latency(stat, family) for family in LATENCY_FAMILIES for stat in TENANT_STATS),
        *(Metric(f"tenants.n_{family}", "samples", Direction.NONE, f"samples behind one tenant's {family} statistics")
          for family in LATENCY_FAMILIES),
    )


TENANT_METRICS = _tenant_metrics()

# --- capacity (batchperf capacity: batchperf.capacity.search), in its own results file ---------------------------

# A capacity search is one number per search: the gate's spread term is the search's own stated spread (the fit's
# standard deviation and the between-search floor measured in studies/capacity-repeat), k × it at most the cap.
# The absolute figures keep their 10% CPU floor, so that a record stating no spread (before issue 41) is judged as
# before; k × the spread a search states now (3 × at least ABSOLUTE_FLOOR 4.3%: 12.9%) is above it anyway.
CAPACITY = Tolerance({"cpu": 0.10, "gpu": 0.05, "*": 0.10}, {"cpu": 0.45, "gpu": 0.20, "*": 0.30})
# The relative capacity, whose reference cancels the machine's speed, varied 2.3% (sd) between six quiet searches
# (issue 57): its CPU floor is 3 × that, 7%, so a search whose own spread is small (a narrow interval) is judged
# at ±7-8% and a 10% loss is called; every record that has a relative capacity states its spread (issue 41 on).
RELATIVE_CAPACITY = Tolerance({"cpu": 0.07, "gpu": 0.05, "*": 0.07}, {"cpu": 0.45, "gpu": 0.20, "*": 0.30})

_BEFORE_57 = " (in records before issue 57, whose search bisected)"

CAPACITY_METRICS: tuple[Metric, ...] = (
    Metric("capacity.max_load", "load factor", Direction.HIGHER, "the highest offered-load factor at which SLO "
           "attainment stays >= the target: where a fit of attainment against load over every probe's requests "
           "crosses the target (the bracket's lower end in records before issue 57)", export="capacity_load_factor",
           tolerance=CAPACITY, tracked=True, spread="capacity.spread"),
    Metric("capacity.max_request_rate", "requests/s", Direction.HIGHER, "requests offered per second at the "
           "capacity: max_load × the offered rate per unit of load, over its arrival span, of the probes nearest it "
           "(of every probe before the speed effect; offered / the probe's duration at the bracket's lower end in "
           "records before issue 57)",
           export="capacity_request_rate_requests_per_second", tolerance=CAPACITY, spread="capacity.spread"),
    Metric("capacity.relative_capacity", "ratio", Direction.HIGHER, "the offered rate at the capacity as a share of "
           "the rate the same cell served saturated (reference_rate, pooled over the search's probes): the "
           "machine's speed cancels", export="capacity_relative_ratio",
           tolerance=RELATIVE_CAPACITY, tracked=True, spread="capacity.relative_spread"),
    Metric("capacity.interval_low", "load factor", Direction.NONE, "the lower end of max_load's interval at the "
           "search's confidence (profile likelihood of the fit, quasi-binomial)"),
    Metric("capacity.interval_high", "load factor", Direction.NONE, "the upper end of max_load's interval"),
    Metric("capacity.confidence", "ratio", Direction.NONE, "the confidence of the interval"),
    Metric("capacity.target_attainment", "ratio", Direction.NONE, "the attainment the search held the load to"),
    Metric("capacity.resolution", "ratio", Direction.NONE, "the search's stated resolution: the interval's width / "
           "max_load at which it stops (bracket width / its lower end" + _BEFORE_57 + ")"),
    Metric("capacity.requests", "requests", Direction.NONE, "requests offered over every probe of the search"),
    Metric("capacity.dispersion", "factor", Direction.NONE, "the search's quasi-binomial dispersion: how much more "
           "than the binomial the probes varied about the fitted curve (>= 1)"),
    Metric("capacity.slope", "ratio", Direction.NONE, "attainment lost per unit of relative load at the capacity, "
           "from the fit (across the bracket" + _BEFORE_57 + ")"),
    Metric("capacity.speed_effect", "factor", Direction.NONE, "the fit's speed effect: logits of attainment per unit "
           "of log reference rate, each probe's process's speed taken out of the fit (absent when not every probe ran "
           "a reference, or before the speed effect); negative when the faster processes happened to meet fewer",
           signed=True),
    Metric("capacity.reference_rate", "requests/s", Direction.NONE, "requests per second the cell served saturated "
           "(its reference round at batchperf.capacity.search.REFERENCE_LOAD, in each probe's process), mean over "
           "every probe of the search (over the runs at the capacity load" + _BEFORE_57 + ")"),
    Metric("capacity.reference_drift", "ratio", Direction.NONE, "the coefficient of variation of every probe's "
           "reference rate over the search: the round's own noise and the machine's drift"),
    Metric("capacity.spread", "ratio", Direction.NONE, "max_load's expected standard deviation from search to "
           "search, as a share of it: sqrt(the fit's sd² + the measured floor²), the fit's sd read from its "
           "interval (sqrt(binomial_spread² + width²/12 + reference_drift² + floor²)" + _BEFORE_57 + ")"),
    Metric("capacity.relative_spread", "ratio", Direction.NONE, "relative_capacity's expected standard deviation "
           "from search to search, as a share of it: as spread with the pooled reference's standard error and its "
           "own measured floor"),
    Metric("capacity.probes", "runs", Direction.NONE, "short runs the search made"),
    Metric("capacity.search_s", "s", Direction.NONE, "wall time of the search"),
    # stored by searches before issue 57 only (LEGACY_CAPACITY): read and shown as they were
    Metric("capacity.bracket_high", "load factor", Direction.NONE, "the lowest load factor that missed the target"
           + _BEFORE_57),
    Metric("capacity.attainment_at_max_load", "ratio", Direction.NONE, "SLO attainment measured at the capacity "
           "load (requests met / offered, pooled over its runs)" + _BEFORE_57),
    Metric("capacity.requests_at_max_load", "requests", Direction.NONE, "requests offered at the capacity load, "
           "pooled over its runs" + _BEFORE_57),
    Metric("capacity.binomial_spread", "ratio", Direction.NONE, "the within-run term of the capacity's spread, as a "
           "share of it: sqrt(dispersion p (1-p) / requests) / slope" + _BEFORE_57),
)

# what only records before issue 57 store (tests/measure/test_catalogue.py finds them in such a record)
LEGACY_CAPACITY = frozenset({"capacity.bracket_high", "capacity.attainment_at_max_load",
                             "capacity.requests_at_max_load", "capacity.binomial_spread"})

# --- the workload's own numbers (batchperf.workload.traffic.describe_workload) ------------------------------------

WORKLOAD_METRICS: tuple[Metric, ...] = (
    Metric("workload.load", "factor", Direction.NONE, "offered-load factor the workload was built with "
           "(--batchperf-load)"),
    Metric("workload.expected_prefix_hit_rate", "ratio", Direction.NONE, "prompt tokens a prefix cache can serve / "
           "prompt tokens sent (shared-prefix and trace workloads), beside counters.prefix_cache_hit_rate",
           export="workload_expected_prefix_hit_ratio", workloads=("prefix", "trace")),
)

# --- the batching policy (issue 27): what batchperf's engine's policy did (batchperf.engine.policies, its state()),
# median over rounds; vLLM and the hf backends store only its name and engine --------------------------------------

ENGINE_POLICY = ("continuous",)  # the backends whose policy reports its state

POLICY_METRICS: tuple[Metric, ...] = (
    Metric("policy.displaced", "requests", Direction.NONE, "running requests preempted to admit a waiting one (a "
           "more urgent arrival: priority) in a round; KV-shortage preemptions are counters.num_preemptions",
           backends=ENGINE_POLICY, export="policy_displaced_requests"),
    *(Metric(f"policy.{name}", "requests", Direction.NONE, f"aimd: the running cap {what} in a round",
             backends=ENGINE_POLICY) for name, what in (("cap_final", "at the end"), ("cap_min", "at its lowest"),
                                                         ("cap_max", "at its highest"))),
    Metric("policy.increases", "steps", Direction.NONE, "aimd: additive increases of the cap in a round (a step at "
           "the cap that met the target)", backends=ENGINE_POLICY),
    Metric("policy.decreases", "steps", Direction.NONE, "aimd: multiplicative decreases of the cap in a round (a step "
           "over the target)", backends=ENGINE_POLICY),
    Metric("policy.target_ms", "ms", Direction.NONE, "aimd: the step latency it held the cap to (the tightest TPOT, "
           "and half the tightest TTFT, unless given as target_ms)", backends=ENGINE_POLICY),
    *(Metric(f"policy.steps_{rule}", "steps", Direction.NONE, f"seed: steps its {what} rule decided in a round",
             backends=ENGINE_POLICY)
      for rule, what in (("queue", "queue (pending > THRESHOLD_HIGH: min(MAX_BATCH, pending))"),
                         ("sla", "SLA (latency over the SLA: batch 1)"), ("optimal", "default (OPTIMAL_BATCH)"))),
    Metric("policy.lifts", "tenants", Direction.NONE, "fair: counters lifted when a tenant became backlogged in a "
           "round (VTC's lift)", backends=ENGINE_POLICY),
)

CATALOGUE: tuple[Metric, ...] = (*RUN_METRICS, *KV_METRICS, *TELEMETRY_METRICS, *COUNTER_METRICS,
                                 *EFFICIENCY_METRICS, *CLIENT_METRICS, *WORKLOAD_METRICS, *SLO_METRICS,
                                 *TENANT_METRICS, *CAPACITY_METRICS, *POLICY_METRICS)
BY_PATH: dict[str, Metric] = {m.path: m for m in CATALOGUE}
SIGNED: frozenset[str] = frozenset(m.path for m in CATALOGUE if m.signed)  # the measured numbers that may be < 0

# --- the tables every consumer reads --------------------------------------------------------------------------

GATED: tuple[Metric, ...] = tuple(m for m in CATALOGUE if m.gated)  # the regression gate's rules
TRACKED: tuple[Metric, ...] = tuple(m for m in CATALOGUE if m.tracked)  # batchperf history's series
EXPORTED: tuple[Metric, ...] = tuple(m for m in CATALOGUE if m.export)  # batchperf export's samples
SUMMARY: tuple[Metric, ...] = tuple(sorted((m for m in CATALOGUE if m.column), key=lambda m: (
    "out tok/s", "P99 E2EL ms", "mean TTFT ms", "KV B/req", "KV B/tok", "n", "preempt", "SLO att").index(m.column)))
# batchperf ab's default deciding metric: throughput alone (docs/ab.md: every deciding metric shares alpha, and the
# tails are the noisiest); the latencies are reported. --latency-decides restores the older set, the tails a user feels
AB_DEFAULT: tuple[str, ...] = ("output_throughput",)
AB_WITH_LATENCY: tuple[str, ...] = ("output_throughput", "p99_ttft_ms", "p99_e2el_ms")
# and in a cell with tenants, these per-tenant numbers, one series per tenant (``p99_ttft_ms[interactive]``): reported
# beside, and deciding where --metrics names one (a priority policy exists for one tenant's latency)
AB_PER_TENANT: tuple[str, ...] = ("output_throughput", "p99_ttft_ms", "p99_tpot_ms", "attainment")
# what a release chain lists beside a confirmed call to explain it (docs/upgrades.md, "Confirmed calls, explained"):
# the engine's own figures, whichever a cell's records carry; ab judges the gated ones, the chain reads the rest from
# the pairs' results files, each with the same interval
ENGINE_FIGURES: tuple[str, ...] = (
    "counters.engine_steps", "counters.iteration_tokens_mean", "counters.num_requests_running_mean",
    "counters.request_prefill_time_seconds", "counters.request_decode_time_seconds",
    "telemetry.cpu_seconds_per_output_token", "counters.num_preemptions", "counters.prefix_cache_hit_rate",
    "kv.bytes_per_token_measured", "kv.kv_bytes_per_request_mean", "kv.kv_cache_peak_bytes")
# the GPU check's A/A spread: every gated number of the metrics section (the time-based ones)
AA_METRICS: tuple[str, ...] = tuple(m.name for m in GATED if m.section == "metrics")


def by_name(name: str) -> Metric:
    """The entry for ``name`` (``p99_ttft_ms``) or a path (``metrics.p99_ttft_ms``); KeyError names the known.
    A per-tenant entry repeats a cell-wide name (``tenants.p99_ttft_ms``): the name alone is the cell-wide one."""
    for m in sorted(CATALOGUE, key=lambda m: m.per_tenant):
        if name in (m.path, m.name):
            return m
    raise KeyError(f"no metric {name!r} in the catalogue (batchperf.measure.catalogue)")


def _check() -> None:
    paths = [m.path for m in CATALOGUE]
    if len(set(paths)) != len(paths):
        raise ValueError("the catalogue names a metric twice")
    if missing := {c.name for c in COUNTERS} ^ {m.name for m in COUNTER_METRICS}:
        raise ValueError(f"every engine counter needs one catalogue entry: {sorted(missing)}")
    if unknown := [n for n in (*AB_DEFAULT, *AB_WITH_LATENCY) if by_name(n) not in GATED]:
        raise ValueError(f"ab's default deciding metrics must be gated: {unknown}")
    if unknown := [p for p in ENGINE_FIGURES if p not in BY_PATH]:
        raise ValueError(f"the chain's engine figures must be catalogued: {unknown}")


_check()
