"""The machine beside a verdict: the probes a run recorded, what bounds a cell, and when the machine moved.

A session of the suite probes the machine (:mod:`batchperf.telemetry.probe`) when its first cell starts and after
its last, and stores both in the results file's ``machine_info.batchperf_probe`` (``{"start": …, "end": …}``);
:func:`session_probes` reads them back (the gate, ``compare``, ``compare --hardware``, and ``ab`` for each pair's
runs).

**What bounds a cell** (:func:`bound_of`), from its record: the tokens one engine step computes, ``T`` (the
engine's own ``counters.iteration_tokens_mean`` where it has it, else the workload's ``batch × (prompt + output) /
(1 + output)``: one prefill and ``output`` decode steps per batch). ``T >=`` :data:`GEMM_TOKENS` is prefill-heavy:
*GEMM-bound*. Below it the cell is decode-heavy: *bandwidth-bound* when its decode moved bytes at
>= :data:`BANDWIDTH_SHARE` of the device's peak (``efficiency.decode_mbu`` on a GPU), else *dispatch-bound* (a small
model's decode waits on Python and kernel launches, not on memory; what the CPU tier's cells are).

**The machine moved** (:func:`machine_moved`): for a cell the gate calls a *regression*, the probe figure of the
cell's bound (GEMM GFLOP/s, copy GB/s, interpreter Mops/s) in this run against the baseline's (the mean of its start
and end probes; of every run's probes for a baseline pooled from several, :func:`pooled_probes`). When the machine
measured slower by more than the smallest tolerance among the cell's regressed speed metrics (throughput, latencies,
CPU time per token: not KV bytes or memory, which no machine speed moves), the verdict's note says so. So it does
when the cell's own threads got less of a CPU than the baseline's by more than that tolerance
(``telemetry.cpu_wait_share``, :mod:`batchperf.telemetry.runqueue`: the share of their runnable time spent waiting
for a CPU, ``w``; the CPU lost is ``1 - (1 - w) / (1 - w_baseline)``), which the probe, half a second at the
session's ends, can miss: neighbours that leave a core free for a moment. ``--batchperf-machine-moved=not-judged``
makes such a cell *not judged* instead of a regression; the default, ``mark``, keeps the regression and adds the
note.
"""

from __future__ import annotations

import enum
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from batchperf.regress.verdict import CellVerdict, MetricVerdict, Verdict
from batchperf.results.io import ResultsFile
from batchperf.results.record import CellRecord, ResultsError
from batchperf.telemetry.probe import FIGURES, MachineProbe

PROBE_KEY = "batchperf_probe"  # in machine_info: {"start": probe, "end": probe}
GEMM_TOKENS = 128  # tokens per engine step from which matrix multiplies, not dispatch, set a step's time
BANDWIDTH_SHARE = 0.25  # a decode moving bytes at this share of the peak is bound by memory
MODES = ("mark", "not-judged")
SPEED_SECTIONS = ("metrics.",)  # throughput and latencies
SPEED_METRICS = ("telemetry.cpu_seconds_per_output_token",)
MACHINE_NOTE = "the machine itself measured"  # how the note starts (the session's summary repeats it)
WAIT_SHARE = "telemetry.cpu_wait_share"  # the cell's threads' wait for a CPU (batchperf.telemetry.runqueue)


class Bound(enum.Enum):
    GEMM = "GEMM"
    BANDWIDTH = "bandwidth"
    DISPATCH = "dispatch"

    @property
    def figure(self) -> str:
        """The probe figure that measures this resource."""
        return {Bound.GEMM: "gemm_gflops", Bound.BANDWIDTH: "copy_gbps", Bound.DISPATCH: "interp_mops"}[self]


@dataclass(frozen=True, slots=True)
class SessionProbes:
    """The probes of one session: at its start and after its last cell (either may be absent)."""

    start: MachineProbe | None = None
    end: MachineProbe | None = None
    between: tuple[MachineProbe, ...] = ()  # a pooled baseline's: the probes of its runs between its first start
    # and its last end (:func:`pooled_probes`)

    @property
    def probes(self) -> tuple[MachineProbe, ...]:
        return tuple(p for p in (self.start, *self.between, self.end) if p is not None)

    def figure(self, name: str) -> float | None:
        """The mean of the probes that measured ``name``; None when none did."""
        values = [v for p in self.probes if (v := p.get(name)) is not None]
        return statistics.fmean(values) if values else None

    def missing(self, name: str) -> str:
        """Why ``name`` has no figure here."""
        reasons = [p.missing[name] for p in self.probes if name in p.missing]
        return reasons[0] if reasons else "not probed (recorded before batchperf probed the machine)"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {side: p.to_dict() for side, p in (("start", self.start), ("end", self.end))
                               if p is not None}
        if self.between:
            out["between"] = [p.to_dict() for p in self.between]
        return out

    @classmethod
    def from_dict(cls, data: Any) -> SessionProbes:
        if not isinstance(data, Mapping):
            raise ValueError(f"is a {type(data).__name__}, not an object of start and end probes")
        parsed = {}
        for side in ("start", "end"):
            if data.get(side) is not None:
                try:
                    parsed[side] = MachineProbe.from_dict(data[side])
                except ValueError as exc:
                    raise ValueError(f".{side}: {exc}") from None
        between = data.get("between") or []
        if not isinstance(between, list):
            raise ValueError(f".between: is a {type(between).__name__}, not a list of probes")
        try:
            return cls(**parsed, between=tuple(MachineProbe.from_dict(p) for p in between))
        except ValueError as exc:
            raise ValueError(f".between: {exc}") from None


def pooled_probes(sessions: list[SessionProbes | None]) -> SessionProbes | None:
    """The probes of several runs pooled into one (a baseline made of them): the first run's start, the last run's
    end, and every other probe between, so that each figure is the mean over all of them, not the first run's alone.
    None when no run was probed."""
    probes = [p for s in sessions if s is not None for p in s.probes]
    if not probes:
        return None
    if len(probes) == 1:
        return SessionProbes(start=probes[0])
    return SessionProbes(start=probes[0], end=probes[-1], between=tuple(probes[1:-1]))


def session_probes(run: ResultsFile) -> SessionProbes | None:
    """The machine probes ``run`` recorded (``machine_info.batchperf_probe``); None for a file made before batchperf
    probed the machine. A malformed block is a :class:`ResultsError` naming the file."""
    raw = run.machine_info.get(PROBE_KEY)
    if raw is None:
        return None
    try:
        return SessionProbes.from_dict(raw)
    except ValueError as exc:
        raise ResultsError(run.path, f"machine_info.{PROBE_KEY}{exc if str(exc).startswith('.') else ' ' + str(exc)}",
                           "Re-run the cells with this batchperf, or delete that block (the probe is then missing)")


def speed_gap(a: SessionProbes | None, b: SessionProbes | None) -> dict[str, float]:
    """Probe figure -> B's machine speed against A's (``b / a - 1``, the mean of each side's start and end probes),
    for the figures both sides measured: in ``ab``, how differently fast the machine was for the two processes of
    one pair. Empty when a side was not probed."""
    if a is None or b is None:
        return {}
    return {name: fb / fa - 1 for name in FIGURES
            if (fa := a.figure(name)) is not None and (fb := b.figure(name)) is not None}


def gaps_beyond(gaps: Mapping[str, float], margin: float) -> str:
    """The gaps of :func:`speed_gap` larger than ``margin``, in words ("GEMM +8%, interpreter -12%"); empty if none."""
    return ", ".join(f"{FIGURES[name][0]} {gap:+.0%}" for name, gap in gaps.items() if abs(gap) > margin)


# --- what bounds a cell ---------------------------------------------------------------------------


def tokens_per_step(record: CellRecord) -> float | None:
    """Tokens one engine step computes: the engine's counter, else estimated from the workload; None when neither
    says (a record without batch size or lengths)."""
    if (counted := record.value("counters.iteration_tokens_mean")) is not None and counted > 0:
        return counted
    outputs = record.cell.get("output_lens") or []
    prompt = record.prompt_tokens
    if not outputs or not record.batch_size or not (prompt == prompt):  # NaN: no prompt length recorded
        return None
    out = statistics.fmean(outputs)
    return record.batch_size * (prompt + out) / (1 + out)


def bound_of(record: CellRecord) -> tuple[Bound, str]:
    """What bounds ``record``'s cell, and why (the figures the rule read)."""
    steps = tokens_per_step(record)
    if steps is None:
        return Bound.DISPATCH, "no batch size or lengths recorded: taken as dispatch-bound"
    if steps >= GEMM_TOKENS:
        return Bound.GEMM, f"{steps:.0f} tokens per step (>= {GEMM_TOKENS}): prefill-heavy"
    mbu = record.value("efficiency.decode_mbu")
    if mbu is not None and mbu >= BANDWIDTH_SHARE:
        return Bound.BANDWIDTH, f"{steps:.0f} tokens per step, decode MBU {mbu:.0%} (>= {BANDWIDTH_SHARE:.0%})"
    why = "" if mbu is None else f", decode MBU {mbu:.0%}"
    return Bound.DISPATCH, f"{steps:.0f} tokens per step (< {GEMM_TOKENS}){why}: decode-heavy, dispatch-bound"


# --- the machine moved ----------------------------------------------------------------------------


def _speed(metric: MetricVerdict) -> bool:
    return metric.metric.startswith(SPEED_SECTIONS) or metric.metric in SPEED_METRICS


def machine_moved(verdict: CellVerdict, record: CellRecord, baseline: SessionProbes | None,
                  current: SessionProbes | MachineProbe | None, mode: str = "mark",
                  baseline_record: CellRecord | None = None) -> CellVerdict:
    """``verdict`` with the machine's own change in its notes when it explains a regression (module doc): the
    probe of the cell's bound, and the cell's own CPU wait share against ``baseline_record``'s; a regression whose
    machine moved is *not judged* under ``mode="not-judged"``. Anything but a regression of a speed metric is
    returned as it is."""
    if mode not in MODES:
        raise ValueError(f"machine-moved mode must be one of {', '.join(MODES)}, got {mode!r}")
    regressed = [m for m in verdict.metrics if m.verdict is Verdict.REGRESSION and m.deciding and _speed(m)]
    if verdict.verdict is not Verdict.REGRESSION or not regressed:
        return verdict
    tightest = min(regressed, key=lambda m: m.tolerance)
    beyond = f"beyond the {tightest.tolerance:.0%} tolerance of {tightest.name}"
    probed, unknown = _probe_note(record, baseline, current, tightest.tolerance)
    moved = [n for n in (probed, _busy_note(record, baseline_record, tightest.tolerance)) if n]
    if not moved:
        return replace(verdict, notes=(*verdict.notes, f"whether the machine moved is unknown: {unknown}")) \
            if unknown else verdict
    note = "; and ".join(moved) + f": {beyond}, so the machine, not the code, may explain this regression"
    if unknown:
        note += f" (no probe to compare: {unknown})"
    if mode == "mark":
        return replace(verdict, notes=(*verdict.notes, note))
    return replace(verdict, verdict=Verdict.NOT_JUDGED,
                   notes=(*verdict.notes, note + "; not judged (--batchperf-machine-moved=not-judged)"))


def _probe_note(record: CellRecord, baseline: SessionProbes | None, current: SessionProbes | MachineProbe | None,
                tolerance: float) -> tuple[str, str]:
    """(the probe of the cell's bound slower than the baseline's by more than ``tolerance``, in words, or "";
    why that could not be told, or "")."""
    bound, _ = bound_of(record)
    name = bound.figure
    what, unit = FIGURES[name]
    now = current.get(name) if isinstance(current, MachineProbe) else None if current is None else current.figure(name)
    then = None if baseline is None else baseline.figure(name)
    if now is None or then is None:
        side = "the baseline" if then is None else "this run"
        why = (baseline or SessionProbes()).missing(name) if then is None else (
            current.missing.get(name, "not probed") if isinstance(current, MachineProbe)
            else (current or SessionProbes()).missing(name))
        return "", f"{side} has no {what} probe ({why})"
    slower = 1 - now / then
    if slower <= tolerance:
        return "", ""
    return (f"{MACHINE_NOTE} {slower:.0%} slower on {what} than when the baseline was made ({now:.3g} "
            f"vs {then:.3g} {unit}; the cell is {bound.value}-bound)"), ""


def cpu_lost(now: float | None, then: float | None) -> float | None:
    """The share of the CPU a cell's threads got ``then`` that they did not get ``now`` (their wait shares w: 1 -
    (1 - w_now) / (1 - w_then); negative: more CPU now); None when a side has no share or waited all the time."""
    if now is None or then is None or then >= 1:
        return None
    return 1 - (1 - now) / (1 - then)


def _busy_note(record: CellRecord, baseline: CellRecord | None, tolerance: float) -> str:
    """The cell's threads given less CPU than the baseline's by more than ``tolerance`` (their wait shares, w:
    1 - (1 - w) / (1 - w_baseline) of the CPU lost), in words; "" when not, or when a side has no share."""
    now = record.value(WAIT_SHARE)
    then = None if baseline is None else baseline.value(WAIT_SHARE)
    lost = cpu_lost(now, then)
    if lost is None or lost <= tolerance:
        return ""
    return (f"{MACHINE_NOTE} busy: the cell's threads waited for a CPU {now:.0%} of the time they were ready to run "
            f"({then:.0%} in the baseline), {lost:.0%} less CPU than then")
