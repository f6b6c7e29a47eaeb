"""A hardware upgrade judged: per cell, the speed-up measured beside the speed-up the hardware predicts.

``batchperf compare --hardware OLD NEW`` (and the report's scaling figure) takes two results files of the same
cells on two machines. Per cell (matched by id; the workload must match, the hardware may not):

- **measured** = NEW's output throughput / OLD's;
- **predicted** = how much faster the resource that bounds the cell got (:func:`batchperf.regress.machine.bound_of`,
  decided on OLD's record): on a GPU record (both have ``efficiency.peak_flops_per_s`` and
  ``peak_bandwidth_bytes_per_s``, the roofline behind MFU and MBU) the ratio of the device peaks, FLOP/s for a
  GEMM-bound cell, bytes/s for a bandwidth-bound one; otherwise, and for a dispatch-bound cell (the host's
  interpreter sets its pace), the ratio of the two files' machine probes (GEMM GFLOP/s, copy GB/s, interpreter
  Mops/s; each the mean of its session's start and end probes);
- **verdict** on measured / predicted, with the tolerance of output throughput on the cell's tier (the gate's
  floor; ``--batchperf-tolerance output_throughput=F`` overrides it): within ±tolerance *scaled as the hardware
  predicts*; below *lost efficiency* (the cell did not get what the hardware offers: a kernel that does not use the
  new ISA, a different bound on the new machine); above *beat the prediction* (e.g. a larger cache). No figure on
  either side: *no prediction*, with the reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from batchperf.regress.fingerprint import cell_identity, identity_diff
from batchperf.regress.gate import GateConfig
from batchperf.regress.machine import Bound, SessionProbes, bound_of, session_probes
from batchperf.regress.store import fingerprint_of
from batchperf.regress.verdict import markdown_cell
from batchperf.results.io import ResultsFile
from batchperf.results.record import CellRecord
from batchperf.telemetry.probe import FIGURES

SCALED = "scaled as the hardware predicts"
LOST = "lost efficiency"
BEAT = "beat the prediction"
NO_PREDICTION = "no prediction"
NOT_COMPARABLE = "not comparable"
THROUGHPUT = "metrics.output_throughput"
PEAKS = {Bound.GEMM: ("efficiency.peak_flops_per_s", "device peak FLOP/s"),
         Bound.BANDWIDTH: ("efficiency.peak_bandwidth_bytes_per_s", "device peak bandwidth")}


@dataclass(frozen=True, slots=True)
class Scaling:
    """One cell of a hardware comparison."""

    cell: str
    bound: Bound
    measured: float | None  # NEW / OLD output throughput
    predicted: float | None  # NEW / OLD of the bound's resource
    basis: str  # what the prediction was read from ("probe: GEMM GFLOP/s", "device peak FLOP/s")
    tolerance: float
    verdict: str
    note: str = ""  # why the bound (or why there is no prediction)

    @property
    def efficiency(self) -> float | None:
        """measured / predicted: 1 is exactly what the hardware predicts."""
        if self.measured is None or not self.predicted:
            return None
        return self.measured / self.predicted


def _ratio(old: float | None, new: float | None) -> float | None:
    return new / old if old and new is not None and math.isfinite(new / old) else None


def predicted(bound: Bound, old: CellRecord, new: CellRecord, old_probes: SessionProbes | None,
              new_probes: SessionProbes | None) -> tuple[float | None, str]:
    """(NEW / OLD of the resource that bounds the cell, what it was read from, or why there is none)."""
    if bound in PEAKS:
        path, what = PEAKS[bound]
        if (peak := _ratio(old.value(path), new.value(path))) is not None:
            return peak, what
    name = bound.figure
    what, unit = FIGURES[name]
    then = None if old_probes is None else old_probes.figure(name)
    now = None if new_probes is None else new_probes.figure(name)
    if then is None or now is None:
        side, probes = ("OLD", old_probes) if then is None else ("NEW", new_probes)
        return None, f"{side} has no {what} probe ({(probes or SessionProbes()).missing(name)})"
    return now / then, f"probe: {what} {unit}"


def judge_scaling(cell: str, old: CellRecord, new: CellRecord, old_probes: SessionProbes | None,
                  new_probes: SessionProbes | None, config: GateConfig = GateConfig()) -> Scaling:
    bound, why = bound_of(old)
    rule = next(r for r in config.rules if r.path == THROUGHPUT)
    tolerance = rule.floor(old.tier)
    if diffs := identity_diff(cell_identity(old, engine=False), cell_identity(new, engine=False)):
        return Scaling(cell, bound, None, None, "", tolerance, NOT_COMPARABLE, "; ".join(diffs))
    measured = _ratio(old.value(THROUGHPUT), new.value(THROUGHPUT))
    expect, basis = predicted(bound, old, new, old_probes, new_probes)
    if expect is None or measured is None:
        note = basis if expect is None else "no output throughput on one side"
        return Scaling(cell, bound, measured, expect, "" if expect is None else basis, tolerance, NO_PREDICTION, note)
    share = measured / expect
    verdict = LOST if share < 1 - tolerance else BEAT if share > 1 + tolerance else SCALED
    return Scaling(cell, bound, measured, expect, basis, tolerance, verdict, why)


def compare_hardware(old: ResultsFile, new: ResultsFile, config: GateConfig = GateConfig()) -> list[Scaling]:
    """One :class:`Scaling` per cell the two files share, in NEW's order (cells in one file only are left out)."""
    old_probes, new_probes = session_probes(old), session_probes(new)
    out = []
    for name, rec in new.cells.items():
        before = old.find(name, rec.id)
        if before is not None:
            out.append(judge_scaling(rec.id, before, rec, old_probes, new_probes, config))
    return out


def setup_notes(old: ResultsFile, new: ResultsFile) -> list[str]:
    """What differs between the two runs besides the hardware and moves every cell's measured ×: the CPU threads
    the cells ran with (the probes are single-threaded, so a prediction cannot hold it)."""
    found = [fingerprint_of(run) for run in (old, new)]
    threads = [None if f is None else f.identity.cpu_threads for f in found]
    if None in threads or threads[0] == threads[1]:
        return []
    return [f"the cells ran on {threads[0]} CPU thread(s) in OLD and {threads[1]} in NEW (OMP_NUM_THREADS): every "
            "measured × includes that, and the single-threaded probes' prediction does not; measure both with the "
            "same thread count to judge the hardware alone"]


def _num(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def render_hardware_markdown(rows: list[Scaling], old: str, new: str, setup: list[str] | None = None) -> str:
    """The table ``compare --hardware`` prints: one row per cell, then the count per verdict, then the notes: what
    differs besides the hardware (:func:`setup_notes`), and why a cell has no prediction."""
    lines = [f"## batchperf compare --hardware: `{old}` → `{new}`", "",
             "| cell | bound | measured × | predicted × | basis | measured / predicted | tolerance | verdict |",
             "|---|---|--:|--:|---|--:|--:|---|"]
    for r in rows:
        lines.append(f"| {markdown_cell(r.cell)} | {r.bound.value} | {_num(r.measured, '.2f')} | "
                     f"{_num(r.predicted, '.2f')} | {r.basis or '-'} | {_num(r.efficiency, '.0%')} | "
                     f"±{r.tolerance:.0%} | {r.verdict} |")
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.verdict] = counts.get(r.verdict, 0) + 1
    lines += ["", ", ".join(f"{n} {v}" for v, n in counts.items()) or "no cell in both files"]
    notes = [f"- **not the hardware alone**: {n}" for n in setup or []]
    notes += [f"- {r.cell}: {r.note}" for r in rows if r.verdict in (NO_PREDICTION, NOT_COMPARABLE)]
    return "\n".join(lines + ([""] + notes if notes else []))

