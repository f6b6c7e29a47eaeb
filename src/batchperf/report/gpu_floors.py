"""The GPU check's measured floors: the A/A spread per gated metric, a suggested floor from it, the injected A/B's
change, the gate's own verdict on both, and every cell's clocks (``ci/gpu_check.sh``, docs/gpu.md).

- **A/A**: the same cells run twice, in separate processes; ``|a − b| / mean(a, b)`` per gated metric and cell.
  Cells whose GPU did not hold its clocks (:func:`batchperf.telemetry.gpu_clocks.void_reason`) are left out and named.
- **Suggested floor**: twice the worst A/A spread, rounded up to a whole percent (at least 1%). Twice, because a
  handful of A/A pairs shows the common spread, not the tail a nightly run of many cells meets, and a baseline is
  compared days later, not minutes.
- **A/B**: the same cells with ``BATCHPERF_INJECT_SLOWDOWN=0.05`` (each forward pass 5% slower); its change per
  metric against the mean of the two A runs, and whether today's floor and the suggested one would catch it.
- **The gate**: :func:`batchperf.regress.gate.compare_cell` on the first A run as the baseline, against the A/A
  run (it should say "no change") and the A/B run (a regression, where the floors allow it).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence

from batchperf.measure.catalogue import AA_METRICS, by_name
from batchperf.regress.gate import compare_cell
from batchperf.results.record import CellRecord
from batchperf.telemetry.gpu_clocks import void_reason

INJECTED = 0.05  # the A/B's BATCHPERF_INJECT_SLOWDOWN


def label(r: CellRecord) -> str:
    return f"{r.backend} bs{r.batch_size} p{r.prompt_label}"


def _pct(value: float | None, spec: str = ".1%") -> str:
    return "-" if value is None or math.isnan(value) else format(value, spec)


def pairs(first: Sequence[CellRecord], second: Sequence[CellRecord]) -> list[tuple[CellRecord, CellRecord]]:
    """(first, second) for each cell id in both runs, in the first run's order."""
    again = {r.id: r for r in second}
    return [(r, again[r.id]) for r in first if r.id in again]


def void_cells(*runs: Sequence[CellRecord]) -> dict[str, str]:
    """cell label -> why, for every cell whose GPU did not hold its clocks in any of ``runs``."""
    return {label(r): why for run in runs for r in run if (why := void_reason(r.telemetry))}


def aa_spread(first: Sequence[CellRecord], second: Sequence[CellRecord]) -> dict[str, dict[str, float]]:
    """metric -> cell label -> ``|a − b| / mean(a, b)`` for every cell in both runs whose clocks held in both."""
    spread: dict[str, dict[str, float]] = {m: {} for m in AA_METRICS}
    for r, other in pairs(first, second):
        if void_reason(r.telemetry) or void_reason(other.telemetry):
            continue
        for metric in AA_METRICS:
            a, b = r.metrics.get(metric), other.metrics.get(metric)
            if a is not None and b is not None and a + b > 0:
                spread[metric][label(r)] = abs(a - b) / ((a + b) / 2)
    return spread


def suggested_floor(spreads: Sequence[float]) -> float | None:
    """Twice the worst A/A spread, rounded up to a whole percent, at least 1%; None without a spread."""
    if not spreads:
        return None
    return max(math.ceil(round(200 * max(spreads), 6)) / 100, 0.01)


def ab_change(first: Sequence[CellRecord], aa: Sequence[CellRecord], ab: Sequence[CellRecord]) -> dict[str, float]:
    """metric -> the mean over cells of ``B / mean(A, A') − 1`` (A' the A/A run's value, where it ran); cells
    whose clocks did not hold in any run are left out."""
    again = {r.id: r for r in aa}
    changes: dict[str, list[float]] = {m: [] for m in AA_METRICS}
    for r, b in pairs(first, ab):
        twin = again.get(r.id)
        if any(void_reason(x.telemetry) for x in (r, b, twin) if x is not None):
            continue
        for metric in AA_METRICS:
            values = [x.metrics.get(metric) for x in (r, twin) if x is not None]
            a = [v for v in values if v is not None]
            if a and b.metrics.get(metric) is not None and statistics.fmean(a) > 0:
                changes[metric].append(b.metrics[metric] / statistics.fmean(a) - 1)
    return {m: statistics.fmean(v) for m, v in changes.items() if v}


def floor_rows(spread: Mapping[str, Mapping[str, float]], change: Mapping[str, float], tier: str = "gpu") -> list[str]:
    """Per gated metric: the worst A/A spread, the suggested floor, today's floor (and whether it decides on
    ``tier``), the A/B change, and whether today's and the suggested floor catch the A/B."""
    rows = [f"  {'metric':<20} {'A/A worst':>9} {'suggested':>9} {'floor now':>9} {'A/B change':>10} "
            f"{'caught now':>10} {'at sugg.':>8}"]
    for metric, per_cell in spread.items():
        rule = by_name(metric)
        worst = max(per_cell.values(), default=None)
        floor, suggested, moved = rule.floor(tier), suggested_floor(list(per_cell.values())), change.get(metric)
        # the injected slowdown makes throughput fall and latencies grow: "worse" is in the metric's bad direction
        worse = None if moved is None else (-moved if rule.direction.value == "higher" else moved)

        def caught(limit: float | None) -> str:
            return "-" if worse is None or limit is None else ("yes" if worse > limit else "no")

        now = _pct(floor, ".0%") + ("" if rule.decides(tier) else "*")
        rows.append(f"  {metric:<20} {_pct(worst):>9} {_pct(suggested, '.0%'):>9} {now:>9} "
                    f"{_pct(moved, '+.1%'):>10} {caught(floor):>10} {caught(suggested):>8}")
    rows.append("  (* reported, not deciding, on this tier; 'caught': the A/B moved the metric the bad way by more "
                "than the floor)")
    return rows


def gate_rows(first: Sequence[CellRecord], run: Sequence[CellRecord], what: str) -> list[str]:
    """The gate's verdict on each cell of ``run`` with the first run as its baseline."""
    rows = []
    for base, current in pairs(first, run):
        verdict = compare_cell(base.id, base, current)
        tput = next((m for m in verdict.metrics if m.name == "output_throughput"), None)
        moved = "" if tput is None else f" (output_throughput {_pct(tput.change, '+.1%')}, tolerance " \
                                        f"{_pct(tput.tolerance)})"
        why = [n for n in verdict.notes if n.startswith("void")]
        rows.append(f"  {what} {label(base):<24} {verdict.verdict.value}{moved}" + (f": {why[0]}" if why else ""))
    return rows or [f"  ({what}: no cell in common with the slice)"]


def clock_rows(records: Sequence[CellRecord]) -> list[str]:
    """Each cell's SM clock (start / lowest / largest drop), throttle reasons, peak temperature and mean power."""
    rows = [f"  {'cell':<24} {'SM MHz start':>12} {'lowest':>7} {'drop':>6} {'temp C':>6} {'W mean':>7}  throttle"]
    for r in records:
        t = r.telemetry

        def num(key: str, spec: str = ".0f") -> str:
            value = t.get(key)
            return "-" if not isinstance(value, (int, float)) else format(value, spec)

        throttle = ", ".join(t.get("throttle_reasons") or []) or ("-" if t.get("nvml") != "ok" else "none")
        void = "  VOID" if void_reason(t) else ""
        rows.append(f"  {label(r):<24} {num('sm_clock_start_mhz'):>12} {num('sm_clock_min_mhz'):>7} "
                    f"{num('sm_clock_drop', '.1%'):>6} {num('temperature_peak_c'):>6} {num('power_mean_w'):>7}  "
                    f"{throttle}{void}")
    return rows
