"""What the gate and ``compare`` say beside a cell's metrics: a void cell, a power cap, a driver change, and a
disagreement between wall-clock throughput and CPU time per output token.

- **Void**: a cell measured while its GPU's clock fell or it throttled for heat or a hardware slowdown
  (:func:`batchperf.telemetry.gpu_clocks.void_reason`, in this run or in the baseline) is *not judged*, with the cause.
- **Software power cap**: recorded and named, never voiding.
- **Driver**: the GPU driver is an upgrade axis (an upgrade must still find its baseline), so a different driver
  is compared across, and named loudly first among the notes: a driver changes kernels' speed.
- **Wall against CPU**: CPU time cannot see waits, wall time cannot see work hidden under other work. When the
  two disagree, the note says which way: "wall worse, CPU same: a wait or lost overlap" or "CPU worse, wall
  same: hidden work".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from batchperf.regress.verdict import MetricVerdict, Verdict, fmt_change
from batchperf.results.record import CellRecord
from batchperf.telemetry.gpu_clocks import recorded_reasons, void_reason

WALL = "metrics.output_throughput"
CPU = "telemetry.cpu_seconds_per_output_token"
WAIT = "wall worse, CPU same: a wait or lost overlap"
HIDDEN = "CPU worse, wall same: hidden work"
DRIVER_AXES = ("driver", "cuda_driver")


def void_notes(baseline: CellRecord, current: CellRecord) -> tuple[str, ...]:
    """Why this comparison is void (empty when the clocks held on both sides)."""
    out = []
    if why := void_reason(current.telemetry):
        out.append(f"void: not judged, this run's GPU did not hold its clocks: {why}; re-run the cell on a cool, "
                   f"unthrottled card")
    if why := void_reason(baseline.telemetry):
        out.append(f"void: not judged, the baseline's GPU did not hold its clocks: {why}; refresh the baseline "
                   f"(batchperf refresh)")
    return tuple(out)


def power_cap_notes(baseline: CellRecord, current: CellRecord) -> tuple[str, ...]:
    """The software power cap seen during either cell: recorded, not voiding."""
    return tuple(f"{side} ran at the GPU's software power cap ({', '.join(reasons)}): recorded, not voided"
                 for side, record in (("this run", current), ("the baseline", baseline))
                 if (reasons := recorded_reasons(record.telemetry)))


def driver_note(versions: Mapping[str, tuple[str, str]]) -> tuple[str, ...]:
    """The loud line for a GPU driver that differs from the baseline's (compared across, never silently)."""
    changed = [f"{k} {a} → {b}" for k, (a, b) in versions.items() if k in DRIVER_AXES]
    if not changed:
        return ()
    return (f"GPU DRIVER CHANGED ({', '.join(changed)}): compared across the upgrade, but a driver changes kernels' "
            f"speed; confirm a change with `batchperf ab`, then refresh the baseline under the new driver",)


def disagreement(results: Iterable[MetricVerdict]) -> tuple[str, ...]:
    """The label for wall-clock output throughput and CPU seconds per output token disagreeing, when a cell has
    both: one regressed beyond its tolerance, the other held (no change)."""
    by_path = {r.metric: r for r in results}
    wall, cpu = by_path.get(WALL), by_path.get(CPU)
    if wall is None or cpu is None:
        return ()
    figures = f"(output_throughput {fmt_change(wall.change)}, cpu_seconds_per_output_token {fmt_change(cpu.change)})"
    if wall.verdict is Verdict.REGRESSION and cpu.verdict is Verdict.NO_CHANGE:
        return (f"{WAIT} {figures}",)
    if cpu.verdict is Verdict.REGRESSION and wall.verdict is Verdict.NO_CHANGE:
        return (f"{HIDDEN} {figures}",)
    return ()
