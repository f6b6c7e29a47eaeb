"""The batch size with the most throughput whose tail latency meets the SLOs (``batchperf recommend``).

Per model × prompt length × backend × concurrency (× policy, workload, load and
arrival: the cell's identity but its batch size, as the report's lines are,
:func:`batchperf.report.identity.identity`), every measured batch size
is a candidate. A candidate is rejected when a request failed or generated the
wrong number of tokens, or when one of its P99s (median over rounds) exceeds
its SLO. Of those left, the one with the highest output throughput wins (or
the highest goodput with ``--by goodput``: requests per second that met every
SLO individually, recomputed from the raw traces); a tie goes to the smaller
batch size, which has the lower latency. The exit status is 1 when some group
has no batch size meeting the SLOs, so a CI step can gate on it.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, replace
from operator import attrgetter
from typing import Literal

from batchperf.measure.metrics import SLO, compute_metrics
from batchperf.measure.slo import attainment
from batchperf.report.identity import CLOSED, SYNTHETIC, identity, policy_of
from batchperf.results.record import RERUN, CellRecord, ResultsError

Ranking = Literal["throughput", "goodput"]
NEEDED = ("output_throughput", "p99_e2el_ms", "p99_ttft_ms", "p99_tpot_ms")  # what a candidate is judged on


@dataclass(frozen=True, slots=True)
class SLOTargets:
    """P99 limits in milliseconds; ``None`` leaves that percentile free."""

    p99_e2el_ms: float | None = None
    p99_ttft_ms: float | None = None
    p99_tpot_ms: float | None = None

    def __post_init__(self) -> None:
        values = asdict(self)
        if all(v is None for v in values.values()):
            raise ValueError("give at least one SLO: --p99-e2el-ms, --p99-ttft-ms or --p99-tpot-ms")
        for name, value in values.items():
            if value is not None and not value > 0:
                raise ValueError(f"{name} must be > 0 ms, got {value}")

    def violations(self, metrics: dict[str, float]) -> list[str]:
        out = []
        for name, label in (("p99_e2el_ms", "P99 E2EL"), ("p99_ttft_ms", "P99 TTFT"), ("p99_tpot_ms", "P99 TPOT")):
            limit = getattr(self, name)
            if limit is not None and metrics[name] > limit:
                out.append(f"{label} {metrics[name]:,.1f} ms > {limit:,.1f} ms")
        return out

    def describe(self) -> str:
        return ", ".join(f"{k.removesuffix('_ms').replace('_', ' ').upper()} <= {v:g} ms"
                         for k, v in asdict(self).items() if v is not None)


@dataclass(frozen=True, slots=True)
class Candidate:
    batch_size: int
    score: float  # output tokens/s, or goodput in requests/s
    p99_e2el_ms: float
    p99_ttft_ms: float
    p99_tpot_ms: float
    verdict: str  # "recommended", or why not


@dataclass(frozen=True, slots=True)
class Recommendation:
    model: str
    prompt_len: str
    backend: str
    concurrency: int
    by: Ranking
    batch_size: int | None  # None: no batch size meets the SLOs
    candidates: tuple[Candidate, ...]
    workload: str = SYNTHETIC  # the workload, with its load and arrival when not the batch-size study's


def goodput(cell: CellRecord, slo: SLOTargets) -> float:
    """Median over rounds of requests/s meeting every SLO, from the raw traces."""
    if not cell.traces:
        raise ValueError(f"cell {cell.id} kept no raw traces, so its goodput cannot be computed; "
                         "rank by throughput (--by throughput) or rerun keeping traces")
    per_request = SLO(ttft_ms=slo.p99_ttft_ms, tpot_ms=slo.p99_tpot_ms, e2el_ms=slo.p99_e2el_ms)
    return statistics.median(compute_metrics(t, per_request)["request_goodput"] for t in cell.run_traces())


def _problems(cell: CellRecord) -> list[str]:
    out = []
    if failed := int(cell.metrics.get("failed", 0)):
        out.append(f"{failed} failed request(s)")
    if errors := len(cell.token_count_errors):
        out.append(f"{errors} request(s) with the wrong number of tokens")
    return out


def recommend(cells: list[CellRecord], slo: SLOTargets, by: Ranking = "throughput") -> list[Recommendation]:
    if by not in ("throughput", "goodput"):
        raise ValueError(f"rank by throughput or goodput, not {by!r}")
    groups: dict[tuple[str, tuple[tuple[str, object], ...]], list[CellRecord]] = {}
    for c in cells:
        if lacking := [name for name in NEEDED if name not in c.metrics]:  # a hand-edited file: say where
            raise ResultsError(c.where, f"metrics lacks {', '.join(lacking)}", RERUN)
        # a run split over several files is one sweep: its batch sizes compete, so the run is not a part here
        groups.setdefault((c.prompt_label, identity(c, "run", "batch_size")), []).append(c)
    out = []
    # models, then prompt lengths shortest first, then backends, concurrencies and the rest of the identity
    order = sorted(groups.items(), key=lambda kv: (kv[0][1][0], kv[1][0].prompt_tokens, kv[0][0], kv[0][1][1:]))
    for (prompt, _), mine in order:
        first = mine[0]
        model, conc, workload = first.model_name, first.concurrency, describe_workload(first)
        # a policy other than fcfs is a backend of its own here: its batch sizes compete among themselves
        backend = first.backend if policy_of(first) == "fcfs" else f"{first.backend} policy {policy_of(first)}"
        mine.sort(key=lambda c: c.batch_size)
        sizes = [c.batch_size for c in mine]
        if len(set(sizes)) < len(sizes):
            raise ValueError(f"{model} · prompt {prompt} · {backend} · c{conc}"
                             f"{'' if workload == SYNTHETIC else ' · ' + workload}: batch sizes {sizes} repeat; "
                             "pass one results file per run")
        scores = {c.batch_size: goodput(c, slo) if by == "goodput" else c.metrics["output_throughput"] for c in mine}
        reasons = {c.batch_size: _problems(c) + slo.violations(c.metrics) for c in mine}
        feasible = [c.batch_size for c in mine if not reasons[c.batch_size]]
        best = max(feasible, key=lambda b: (scores[b], -b)) if feasible else None
        unit = "tok/s" if by == "throughput" else "req/s goodput"
        candidates = []
        for c in mine:
            b = c.batch_size
            if b == best:
                verdict = "recommended"
            elif reasons[b]:
                verdict = "rejected: " + "; ".join(reasons[b])
            else:
                verdict = f"meets the SLOs, but {scores[b]:,.2f} < {scores[best]:,.2f} {unit} of bs {best}"
            candidates.append(Candidate(b, scores[b], c.metrics["p99_e2el_ms"], c.metrics["p99_ttft_ms"],
                                        c.metrics["p99_tpot_ms"], verdict))
        out.append(Recommendation(model, prompt, backend, conc, by, best, tuple(candidates), workload))
    return out


def describe_workload(cell: CellRecord) -> str:
    """The cell's workload in words, its load and arrival named when they are not the batch-size study's:
    ``synthetic``, ``tenants:two.toml at load 2x``."""
    parts = dict(identity(cell))
    return " ".join([str(parts["workload"]), *([f"at load {parts['load']:g}x"] if parts["load"] != 1.0 else []),
                     *([f"arriving {parts['arrival']}"] if parts["arrival"] != CLOSED else [])])


def render(recs: list[Recommendation], slo: SLOTargets) -> str:
    lines = [f"SLOs: {slo.describe()}; ranked by {recs[0].by if recs else 'throughput'}", ""]
    for r in recs:
        head = (f"{r.model} · prompt {r.prompt_len} · {r.backend} · concurrency {r.concurrency}"
                f"{'' if r.workload == SYNTHETIC else ' · ' + r.workload}: ")
        if r.batch_size is None:
            lines.append(head + "NO batch size meets the SLOs")
        else:
            best = next(c for c in r.candidates if c.batch_size == r.batch_size)
            unit = "output tok/s" if r.by == "throughput" else "req/s goodput"
            lines.append(head + f"batch size {r.batch_size} ({best.score:,.2f} {unit}, "
                         f"P99 E2EL {best.p99_e2el_ms:,.1f} ms)")
        score = "tok/s" if r.by == "throughput" else "goodput"
        lines.append(f"  {'bs':>4} {score:>10} {'P99 E2EL':>10} {'P99 TTFT':>10} {'P99 TPOT':>10}  verdict")
        for c in r.candidates:
            lines.append(f"  {c.batch_size:>4} {c.score:>10,.2f} {c.p99_e2el_ms:>10,.1f} {c.p99_ttft_ms:>10,.1f} "
                         f"{c.p99_tpot_ms:>10,.1f}  {c.verdict}")
        lines.append("")
    missing = sum(r.batch_size is None for r in recs)
    lines.append(f"{len(recs) - missing} of {len(recs)} groups have a batch size meeting the SLOs"
                 + (f"; {missing} have none: relax the SLOs, or measure smaller batch sizes" if missing else ""))
    return "\n".join(lines)


# --- capacity under SLOs (issue 24): for each batch size (and batching policy, issue 27), the highest load meeting
# the attainment target ----------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CapacityCandidate:
    batch_size: int
    capacity: float  # load factor: the highest one at which attainment >= target (0: none met)
    request_rate: float | None  # requests/s offered at that load (None: not known)
    source: str  # "search" (a batchperf capacity result) or "sweep LOADS" (cells at several --batchperf-load)
    attainment: float  # at the capacity load (0 when none met)
    verdict: str
    policy: str = "fcfs"  # the batching policy (--batchperf-policies entry) it ran


@dataclass(frozen=True, slots=True)
class CapacityChoice:
    group: str  # model · prompt · backend · concurrency · workload (· arrival, when not a closed loop)
    target: float
    batch_size: int | None  # the most capacity; None: no batch size met the target at any load measured
    candidates: tuple[CapacityCandidate, ...]
    policy: str | None = None  # the policy of the best candidate (None: none met the target)


def attainment_of(cell: CellRecord, slo: SLO | None) -> float:
    """The cell's attainment: stored (its workload's SLOs), or recomputed from its traces holding every request to
    ``slo`` (median over rounds; measure.slo.attainment)."""
    if slo is None:
        value = cell.value("slo.attainment")
        if value is None:
            raise ResultsError(cell.where, "no slo.attainment stored", "Re-run it with this batchperf, or give the "
                               "SLOs (--ttft-ms, --tpot-ms, --e2el-ms) to compute attainment from its raw traces")
        return value
    if not cell.traces:
        raise ResultsError(cell.where, "kept no raw traces to compute attainment under the given SLOs",
                           "Re-run keeping traces, or leave the SLOs out to use the workload's own")
    offered = cell.value("slo.offered")
    return statistics.median(
        attainment(t, {tenant: slo for tenant in {r.tenant or "" for r in t.requests}},
                   {"": int(offered)} if offered else None).ratio for t in cell.run_traces())


def _sweep_capacity(cells: list[CellRecord], target: float, slo: SLO | None) -> tuple[float, float, float | None]:
    """(capacity, attainment there, req/s there) of one batch size from cells at several loads: the highest load
    below the first one that misses the target (a later recovery is noise, not capacity)."""
    best = (0.0, 0.0, None)
    for c in sorted(cells, key=attrgetter("load")):
        value = attainment_of(c, slo)
        if value < target:
            break
        offered, duration = c.value("slo.offered"), c.value("metrics.duration")
        best = (c.load, value, offered / duration if offered and duration else None)
    return best


def recommend_capacity(cells: list[CellRecord], target: float = 0.9, slo: SLO | None = None) -> list[CapacityChoice]:
    """Per model × prompt × backend × concurrency × workload: each (policy, batch size)'s capacity and the best one:
    which policy and settings meet the SLOs at the highest load.

    A cell with a ``capacity`` section (``batchperf capacity``) gives its searched capacity (``slo`` must then be
    None: it was searched under its workload's SLOs); otherwise the cells of a batch size at several loads give the
    highest load meeting ``target``. The highest load factor wins (a group has one workload, so its load factors
    compare); a tie goes to the smaller batch size (lower latency), then to fcfs and the policies in name order."""
    if not 0 < target <= 1:
        raise ValueError(f"target attainment must be in (0, 1], got {target}")
    groups: dict[tuple[object, ...], dict[tuple[int, str], list[CellRecord]]] = {}
    for c in cells:
        # the cell's identity but what is compared within a group (batch size, policy) and searched (load)
        parts = dict(identity(c, "run", "batch_size", "policy", "load"))
        key = (parts["model"], c.prompt_label, parts["backend"], parts["concurrency"], parts["workload"],
               *([parts["arrival"]] if parts["arrival"] != CLOSED else []))
        groups.setdefault(key, {}).setdefault((c.batch_size, policy_of(c)), []).append(c)
    out = []
    for key, sizes in sorted(groups.items()):
        scored: list[CapacityCandidate] = []
        for (bs, policy), mine in sorted(sizes.items(), key=lambda kv: (kv[0][1] != "fcfs", kv[0][1], kv[0][0])):
            searched = [c for c in mine if c.capacity]
            if searched:
                if slo is not None:
                    raise ValueError(f"{searched[0].id} is a capacity searched under its workload's SLOs; leave "
                                     "--ttft-ms/--tpot-ms/--e2el-ms out to rank it")
                cap = searched[-1].capacity
                # a fit's capacity holds the target exactly; a bracket's low end (before issue 57) its measured one
                held = float(cap.get("attainment_at_max_load", cap.get("target_attainment", target)))
                scored.append(CapacityCandidate(bs, float(cap["max_load"]), float(cap["max_request_rate"]),
                                                "search", held, "", policy))
                continue
            capacity, value, rate = _sweep_capacity(mine, target, slo)
            loads = ",".join(f"{c.load:g}" for c in sorted(mine, key=attrgetter("load")))
            scored.append(CapacityCandidate(bs, capacity, rate, f"sweep {loads}", value, "", policy))
        # one workload per group: its load factors compare across batch sizes and policies (the rate only reports
        # what it meant); ties: the smaller batch, then the order above (fcfs first)
        feasible = [c for c in scored if c.capacity > 0]
        best = max(feasible, key=lambda c: (c.capacity, -c.batch_size, -scored.index(c))) if feasible else None
        several = len({c.policy for c in scored}) > 1
        name = "" if best is None else (f"{best.policy} " if several else "") + f"bs {best.batch_size}"
        final = []
        for c in scored:
            verdict = ("recommended" if c is best else
                       f"no load measured meets {target:.0%}" if c.capacity == 0 else
                       f"less capacity than {name}")
            final.append(replace(c, verdict=verdict))
        out.append(CapacityChoice(" · ".join(str(k) for k in key), target, best.batch_size if best else None,
                                  tuple(final), best.policy if best else None))
    return out


def render_capacity(choices: list[CapacityChoice], slo: SLO | None) -> str:
    under = ("every request held to " + ", ".join(f"{k.removesuffix('_ms').upper()} <= {v:g} ms"
                                                  for k, v in asdict(slo).items() if v is not None)
             if slo is not None else "each workload's own SLOs")
    lines = [f"capacity: the highest offered load with SLO attainment >= target, under {under}", ""]
    for ch in choices:
        best = f"policy {ch.policy}, batch size {ch.batch_size}" if ch.policy not in (None, "fcfs") else \
            f"batch size {ch.batch_size}"
        lines.append(f"{ch.group}: " + (best if ch.batch_size is not None
                                         else f"NO batch size meets {ch.target:.0%} at any load measured"))
        width = max(6, *(len(c.policy) for c in ch.candidates))
        lines.append(f"  {'policy':<{width}} {'bs':>4} {'capacity':>9} {'req/s':>8} {'attain':>7}  {'from':<16} "
                     "verdict")
        for c in ch.candidates:
            rate = "-" if c.request_rate is None else f"{c.request_rate:.3g}"
            lines.append(f"  {c.policy:<{width}} {c.batch_size:>4} {c.capacity:>8.3g}x {rate:>8} {c.attainment:>7.1%}  "
                         f"{c.source:<16} {c.verdict}")
        lines.append("")
    return "\n".join(lines)
