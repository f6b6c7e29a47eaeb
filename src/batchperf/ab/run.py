"""``batchperf ab``: the same cells in two environments, interleaved in fresh processes, until the answer is clear.

Pair *i* runs one pytest process of A and one of B, in the order A B, B A, A B, … (so a drift of the
machine's speed within a pair cancels over pairs), each writing an ordinary results file. Per cell
and per metric, each pair gives a log-ratio ln(B/A) of the process medians; after every pair
:mod:`batchperf.ab.stats` turns them into an estimate, an interval and a call:

- a *deciding* metric (``--metrics``, default output throughput alone) is judged at the
  per-look level that keeps the whole run's false-alarm rate at ``alpha`` (split over cells × deciding
  metrics, and honest when it looks after every pair); the exact metrics (KV bytes) are deciding too,
  and compared value for value where each side repeats its own value (:func:`exact_call`);
- every other gated metric (the catalogue's gated entries) gets the same estimate and interval, reported, not
  deciding.

A cell's verdict (:mod:`batchperf.regress.verdict`, the gate's vocabulary) is *regression* as soon as one
deciding metric regresses, *no change* / *improvement* once every deciding metric is decided, else
*inconclusive*; a cell that fails in an environment is *failed*, one whose environments ran different cells
is *not judged*. A settled cell keeps its
verdict and is left out of later pairs (``--deselect``); the run stops when every cell is settled or
failed, or the budget (pairs, minutes) is spent. A cell that fails, errors or skips in one environment
is reported as such, never judged. Ctrl-C keeps every finished pair and reports them.
"""

from __future__ import annotations

import datetime as dt
import math
import os
import signal
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from batchperf.ab import judge as ab_judge
from batchperf.ab import outdir
from batchperf.ab import stats as ab_stats
from batchperf.ab.env import (
    Environment,
    EnvironmentProblem,
    Probe,
    SideRun,
    collect,
    duet_cores,
    probe,
    run_cells,
    run_resident,
)
from batchperf.ab.settings import BudgetTooSmall, Settings, UsageProblem
from batchperf.ab.stats import Interval
from batchperf.launch.child import exit_code_of, stop_signals
from batchperf.measure.catalogue import GATED, Direction, Metric
from batchperf.regress.fingerprint import cell_identity, identity_diff, version_diff
from batchperf.regress.gate import EXACT_REL, arrival_reason, client_bound_note, client_bound_reason
from batchperf.regress.verdict import CellVerdict, MetricVerdict, Verdict, combine
from batchperf.results.io import atomic_write_text, read_results
from batchperf.results.record import CellRecord, ResultsError

SCHEMA = 2  # 2: verdicts in the one vocabulary ("not comparable" is now "not judged")


@dataclass(slots=True)
class PairSeries:
    """One metric of one cell over the pairs so far: A's and B's value per pair, and what they say."""

    metric: str  # the catalogue name, e.g. output_throughput
    direction: Direction
    deciding: bool
    margin: float
    a: list[float] = field(default_factory=list)  # per pair, A's value
    b: list[float] = field(default_factory=list)
    interval: Interval | None = None
    call: Verdict = Verdict.INCONCLUSIVE
    note: str = ""  # why it is not judged or is still open (an exact metric: see exact_call)
    reported_why: str = ""  # why a metric that would decide is reported only (the gate's arrival_reason)

    @property
    def shown_note(self) -> str:
        """What its row says: why it is open or not judged, and why it only reports."""
        return "; ".join(filter(None, (self.note, self.reported_why)))

    @property
    def log_ratios(self) -> list[float]:
        return [math.log(y / x) for x, y in zip(self.a, self.b) if x > 0 and y > 0]

    def verdict(self) -> MetricVerdict:
        """This series as the one metric verdict (reference A's median, measured B's, the interval's estimate)."""
        iv = self.interval
        a = statistics.median(self.a) if self.a else None
        b = statistics.median(self.b) if self.b else None
        change = ab_stats.relative(iv.estimate) if iv else math.nan
        return MetricVerdict(self.metric, self.direction, self.call, a, b, change,
                             math.nan if self.direction is Direction.EXACT else self.margin,
                             interval=(ab_stats.relative(iv.low), ab_stats.relative(iv.high)) if iv else None,
                             pairs=len(self.a), deciding=self.deciding, note=self.shown_note)

    def to_dict(self) -> dict[str, Any]:
        iv = self.interval
        return {
            "metric": self.metric, "direction": self.direction.value, "deciding": self.deciding,
            "margin": self.margin, "a": self.a, "b": self.b, "ratios": [y / x if x else None for x, y in zip(self.a, self.b)],
            "n": len(self.a), "call": self.call.value, **({"note": self.shown_note} if self.shown_note else {}),
            **({"estimate": ab_stats.relative(iv.estimate), "low": ab_stats.relative(iv.low),
                "high": ab_stats.relative(iv.high)} if iv else {}),
        }


@dataclass(slots=True)
class CellState:
    id: str
    nodeid: str
    verdict: Verdict = Verdict.INCONCLUSIVE
    settled_at: int | None = None  # pairs behind the frozen verdict
    metrics: dict[str, PairSeries] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)  # environment label -> what happened
    note: str = ""
    client_bound: list[str] = field(default_factory=list)  # pairs whose client set some metrics: left out of them

    @property
    def settled(self) -> bool:
        return self.settled_at is not None

    def cell_verdict(self) -> CellVerdict:
        """This cell as the one cell verdict: deciding metrics first, then the exact ones, then those reported."""
        ordered = sorted(self.metrics.values(), key=lambda m: (not m.deciding, m.direction is Direction.EXACT))
        why = ([self.note] if self.note else []) + [f"in {label}: {w}" for label, w in sorted(self.failures.items())]
        if self.client_bound:
            why.append(f"{len(self.client_bound)} pair(s) client-bound, left out of the metrics their client set: "
                       + "; ".join(self.client_bound[:3]) + ("; …" if len(self.client_bound) > 3 else ""))
        return CellVerdict(self.id, self.verdict, tuple(m.verdict() for m in ordered), tuple(why),
                           settled_at=self.settled_at)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "nodeid": self.nodeid, "verdict": self.verdict.value, "settled_at": self.settled_at,
                "failures": self.failures, "note": self.note, "client_bound": self.client_bound,
                "metrics": [m.to_dict() for m in self.metrics.values()]}


@dataclass(slots=True)
class Pair:
    index: int  # 1-based
    order: tuple[str, str]
    runs: dict[str, SideRun]
    load_avg_1m: float | None

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "order": list(self.order), "load_avg_1m": self.load_avg_1m,
                **{label: {"results": str(r.results) if r.results else None, "log": str(r.log),
                           "seconds": round(r.seconds, 2), "returncode": r.returncode, "started": r.started}
                   for label, r in self.runs.items()}}


@dataclass(slots=True)
class AbResult:
    settings: Settings
    probes: dict[str, Probe]
    judge: ab_judge.Judge  # the test behind each deciding metric's interval (its level or boundaries)
    level_method: str
    cells: dict[str, CellState]
    pairs: list[Pair] = field(default_factory=list)
    status: str = "running"  # done, budget, interrupted, failed
    reason: str = ""  # why it stopped, for budget/interrupted/failed
    started: float = field(default_factory=time.time)
    elapsed_s: float = 0.0
    only_in: dict[str, list[str]] = field(default_factory=dict)  # environment label -> cells the other lacks
    stop_signal: int = signal.SIGINT  # what interrupted it (status "interrupted")
    design: str = "sequential"  # how each pair's processes run: settings.design, "auto" resolved by prepare()

    @property
    def versions_differ(self) -> dict[str, tuple[str, str]]:
        return version_diff(self.probes["A"].axes, self.probes["B"].axes)

    @property
    def vars_differ(self) -> dict[str, tuple[str, str]]:
        a, b = dict(self.settings.a.vars), dict(self.settings.b.vars)
        return {k: (a.get(k, "-"), b.get(k, "-")) for k in sorted(a.keys() | b.keys()) if a.get(k) != b.get(k)}

    @property
    def loads(self) -> list[float]:
        return [p.load_avg_1m for p in self.pairs if p.load_avg_1m is not None]

    @property
    def exit_code(self) -> int:
        return exit_code(self)

    def to_dict(self) -> dict[str, Any]:
        s = self.settings
        envs = {label: {"python": str(env.python), "vars": dict(env.vars), "dir": str(env.dir),
                        "fingerprint": self.probes[label].fingerprint.to_dict(), "axes": self.probes[label].axes}
                for label, env in (("A", s.a), ("B", s.b)) if label in self.probes}
        loads = self.loads
        return {
            "batchperf_ab": SCHEMA, "status": self.status, "reason": self.reason, "exit_code": self.exit_code,
            "started": dt.datetime.fromtimestamp(self.started, dt.timezone.utc).isoformat(timespec="seconds"),
            "elapsed_s": round(self.elapsed_s, 1),
            "command": s.command,
            "settings": {"margin": s.margin, "margins": dict(s.margins), "metrics": list(s.metrics), "alpha": s.alpha,
                         **self.judge.to_dict(), "level_method": self.level_method, "max_pairs": s.max_pairs,
                         "max_minutes": s.max_minutes, "rounds": s.rounds, "design": self.design,
                         "design_asked": s.design,
                         "pytest_args": list(s.pytest_args)},
            "environments": envs,
            "versions_differ": {k: list(v) for k, v in self.versions_differ.items()} if len(self.probes) == 2 else {},
            "vars_differ": {k: list(v) for k, v in self.vars_differ.items()},
            "load_avg_1m": {"min": min(loads), "median": statistics.median(loads), "max": max(loads)} if loads else None,
            "only_in": self.only_in,
            "pairs": [p.to_dict() for p in self.pairs],
            "cells": [c.to_dict() for c in self.cells.values()],
        }


def exit_code(result: AbResult) -> int:
    """0 no regression, 1 regression, 2 inconclusive at the budget, 4 a cell failed to run or was not judged (its
    environments ran different cells), an environment failed, or an unexpected error; 130 interrupted by SIGINT,
    143 by SIGTERM (3, usage, is raised before anything runs)."""
    verdicts = {c.verdict for c in result.cells.values()}
    if result.status == "interrupted":
        return 128 + result.stop_signal
    if Verdict.REGRESSION in verdicts:
        return 1
    if result.status == "failed" or Verdict.FAILED in verdicts or Verdict.NOT_JUDGED in verdicts:
        return 4
    if Verdict.INCONCLUSIVE in verdicts:
        return 2
    return 0


def rules_for(settings: Settings) -> list[tuple[Metric, bool]]:
    """(metric, deciding) for every gated metric: exact ones and ``--metrics`` decide, the rest are reported."""
    return [(r, r.direction is Direction.EXACT or r.name in settings.metrics) for r in GATED]


# --- judging ------------------------------------------------------------------------------------------------------


def add_pair(cell: CellState, settings: Settings, a: CellRecord, b: CellRecord, index: int) -> None:
    """Append pair ``index``'s values of every metric both sides produced, except those a side's client set (a
    server cell whose client lagged: its latencies, and its throughput unless the server was kept full; the
    gate's rule, :func:`batchperf.regress.gate.client_bound_reason`), which that pair leaves out, saying why."""
    left_out: list[str] = []
    for rule, deciding in rules_for(settings):
        x, y = a.value(rule.path), b.value(rule.path)
        if x is None or y is None:
            continue
        result = cell.metrics.get(rule.name)
        if result is None:  # made even when left out below: a deciding metric no pair gave stays undecided
            why = next(filter(None, (arrival_reason(rule.path, record) for record in (a, b))), "")
            result = cell.metrics[rule.name] = PairSeries(rule.name, rule.direction, deciding and not why,
                                                            0.0 if rule.direction is Direction.EXACT
                                                            else settings.margin_of(rule.name), reported_why=why)
        if any(client_bound_reason(rule.path, record, label) for record, label in ((a, "A"), (b, "B"))):
            left_out.append(rule.name)
            continue
        result.a.append(x)
        result.b.append(y)
    if left_out:
        why = "; ".join(n for record, label in ((a, "A"), (b, "B")) if (n := client_bound_note(record, label)))
        cell.client_bound.append(f"pair {index}, {why} (left out of {', '.join(left_out)})")


def judge_metric(result: PairSeries, judge: ab_judge.Judge) -> None:
    if result.direction is Direction.EXACT:
        result.call, result.note = exact_call(result.a, result.b)
        if result.call is Verdict.NOT_JUDGED:
            result.deciding = False  # it cannot decide this cell; reported, with why
        return
    ratios = result.log_ratios
    if not ratios:
        return
    result.interval = judge.interval(ratios)
    result.call = ab_stats.call(result.interval, result.direction is Direction.HIGHER, result.margin)


def exact_call(a: Sequence[float], b: Sequence[float]) -> tuple[Verdict, str]:
    """An exact metric (KV bytes) over the pairs so far, and a note: equal in every pair, no change; a difference
    that each side repeats in every one of its own processes, regression once two pairs show it (one pair:
    inconclusive, a second one confirms); a side whose own processes differ, not judged: the figure depends on
    timing there, so it cannot be asked to be equal. (Where the cell says so in advance, a padded batch under
    open-loop arrivals, the figure never decides at all: :func:`batchperf.regress.gate.arrival_reason`.)"""
    def same(x: float, y: float) -> bool:
        return abs(y - x) <= EXACT_REL * max(abs(x), 1.0)

    if all(same(x, y) for x, y in zip(a, b)):
        return Verdict.NO_CHANGE, ""
    if wanders := [label for label, side in (("A", a), ("B", b)) if not all(same(side[0], v) for v in side)]:
        return Verdict.NOT_JUDGED, (f"differs between {' and '.join(wanders)}'s own processes: it depends on "
                                    "timing in this cell, so it is reported, not compared exactly")
    if len(a) < 2:
        return Verdict.INCONCLUSIVE, "differs in the first pair: a second pair confirms it"
    return Verdict.REGRESSION, ""


def cell_verdict(metrics: Sequence[PairSeries]) -> Verdict:
    """A cell's verdict from its deciding metrics' calls: inconclusive until every one is decided."""
    return combine((m.call for m in metrics if m.deciding), empty=Verdict.INCONCLUSIVE)


def judge_cell(cell: CellState, judge: ab_judge.Judge, pairs: int) -> None:
    """Re-judge an unsettled cell on its pairs so far; freeze it once its verdict is clear."""
    if cell.settled:
        return
    for result in cell.metrics.values():
        judge_metric(result, judge)
    cell.verdict = cell_verdict(list(cell.metrics.values()))
    if cell.verdict is not Verdict.INCONCLUSIVE:
        cell.settled_at = pairs


# --- one pair -----------------------------------------------------------------------------------------------------


def order_of(index: int) -> tuple[str, str]:
    """A B, B A, A B, B A, … (pair 1 is A B): each side runs first as often as second."""
    return ("A", "B") if index % 2 == 1 else ("B", "A")


def failure_of(run: SideRun, cell_id: str, records: Mapping[str, CellRecord]) -> str | None:
    """Why ``cell_id`` gave no usable numbers in this run (None: it did)."""
    outcome = run.outcomes.get(cell_id)
    if outcome is not None and outcome.status != "passed":
        return f"{outcome.status}: {outcome.message}".strip().rstrip(":")
    if cell_id not in records:
        return "no results (the cell did not run)"
    return None


def read_cells(run: SideRun) -> dict[str, CellRecord]:
    """cell id -> record of a run's results file."""
    if run.results is None:
        return {}
    return {rec.id: rec for rec in read_results(run.results).records}


def absorb(result: AbResult, pair: Pair) -> None:
    """Fold a finished pair into every measuring cell: failures, identity checks, values, verdicts."""
    records = {label: read_cells(run) for label, run in pair.runs.items()}
    for cell in measuring(result):
        fails = {label: why for label, run in pair.runs.items()
                 if (why := failure_of(run, cell.id, records[label])) is not None}
        if fails:
            cell.failures.update(fails)
            cell.verdict = Verdict.FAILED
            both = "both environments" if len(fails) == 2 else f"environment {next(iter(fails))} only"
            cell.note = f"pair {pair.index}: fails in {both}"
            continue
        a, b = records["A"][cell.id], records["B"][cell.id]
        if diffs := identity_diff(cell_identity(a), cell_identity(b)):
            cell.verdict = Verdict.NOT_JUDGED
            cell.note = "the environments ran different cells: " + "; ".join(diffs)
            continue
        add_pair(cell, result.settings, a, b, pair.index)
        judge_cell(cell, result.judge, pair.index)


def measuring(result: AbResult) -> list[CellState]:
    """Cells still being measured: not settled, not failed, not incomparable."""
    return [c for c in result.cells.values()
            if not c.settled and c.verdict not in (Verdict.FAILED, Verdict.NOT_JUDGED)]


def check_identity(result: AbResult, pair: Pair) -> str:
    """A problem with the hardware identity the two results files recorded (empty when they match)."""
    prints = {}
    for label, run in pair.runs.items():
        raw = read_results(run.results).fingerprint if run.results else None
        if raw is not None:
            prints[label] = raw.get("identity", {})
    if len(prints) == 2 and (diffs := identity_diff(prints["A"], prints["B"])):
        return f"pair {pair.index}: the environments ran on different hardware identities: {'; '.join(diffs)}"
    return ""


# --- the run ------------------------------------------------------------------------------------------------------

Runner = Callable[..., SideRun]  # (environment, pytest arguments, stem, timeout_s=) like run_cells
Prober = Callable[[Environment], Probe]
Collector = Callable[[Environment, Sequence[str]], dict[str, str]]
Progress = Callable[[str], None]


def prepare(settings: Settings, prober: Prober = probe, collector: Collector = collect) -> AbResult:
    """Probe both environments, check they can be compared, collect the cells and find the per-look level."""
    try:
        probes = {"A": prober(settings.a), "B": prober(settings.b)}
    except EnvironmentProblem as exc:
        raise UsageProblem(str(exc)) from None
    ida, idb = (probes[k].fingerprint.identity for k in ("A", "B"))
    if diffs := identity_diff(ida.to_dict(), idb.to_dict()):
        raise UsageProblem(f"A and B have different hardware identities ({'; '.join(diffs)}); an A/B comparison "
                           "needs the same devices and thread count: set the same CUDA_VISIBLE_DEVICES, "
                           "OMP_NUM_THREADS and CPU affinity for both")
    try:
        found = {"A": collector(settings.a, settings.pytest_args), "B": collector(settings.b, settings.pytest_args)}
    except EnvironmentProblem as exc:
        raise UsageProblem(str(exc)) from None
    shared = [cid for cid in found["A"] if cid in found["B"]]
    if not shared:
        raise UsageProblem(f"the pytest arguments {' '.join(settings.pytest_args) or '(none)'} select no cell that "
                           f"both environments have (A: {len(found['A'])}, B: {len(found['B'])}); e.g. "
                           "-- -m cpu -k 'hf-static and bs8 and p512 and c16'")
    design = resolve_design(settings.design, probes)
    if design == "duet":
        try:
            duet_cores(("A", "B"))
        except EnvironmentProblem as exc:
            raise UsageProblem(str(exc)) from None
    deciding = len(settings.metrics)  # the exact metrics decide too, but by equality: no error to share
    family = settings.alpha / (len(shared) * deciding)
    needed = ab_judge.fewest_max_pairs(settings.test, family)
    if settings.max_pairs < needed:
        fix = (f"give --max-pairs {needed} or more" if needed <= ab_stats.MAX_PAIRS
               else "no --max-pairs allowed is enough")
        raise BudgetTooSmall(f"--max-pairs {settings.max_pairs}: a verdict on {len(shared)} cell(s) x {deciding} "
                             f"deciding metric(s) at --alpha {settings.alpha} needs at least {needed} pairs ({fix}; "
                             "or fewer cells, fewer --metrics, or a larger --alpha)")
    judge = ab_judge.make(settings.test, settings.max_pairs, family)
    cells = {cid: CellState(cid, found["A"][cid]) for cid in shared}
    only = {label: sorted(set(found[label]) - set(found[other]))
            for label, other in (("A", "B"), ("B", "A")) if set(found[label]) - set(found[other])}
    return AbResult(settings, probes, judge, f"{judge.method}; alpha {settings.alpha} over {len(shared)} cell(s) x "
                    f"{deciding} deciding metric(s) = {family:.4g} each", cells, only_in=only, design=design)


def resolve_design(asked: str, probes: Mapping[str, Probe]) -> str:
    """``auto``: ``resident`` (both processes at once, in turns: the steadier pairs per minute, docs/ab.md "Designs")
    unless an environment sees a GPU, where two processes at once would each hold a model and its KV pool in the
    card's memory: ``sequential`` there. Any other design as asked."""
    if asked != "auto":
        return asked
    return "sequential" if any(p.fingerprint.identity.gpus for p in probes.values()) else "resident"


def run_ab(settings: Settings, runner: Runner = run_cells, prober: Prober = probe, collector: Collector = collect,
           progress: Progress = lambda line: None, clock: Callable[[], float] = time.monotonic) -> AbResult:
    """The whole A/B run; :class:`UsageProblem` before anything is measured when it cannot give an answer.

    The output folder is claimed first (:mod:`batchperf.ab.outdir`: new or empty, locked) and, when the run stops
    before measuring anything, removed again. Inside, SIGINT and SIGTERM stop the running process group and end
    the run as interrupted; any other error after the first pair started ends it as failed (exit 4), and ``ab.json``
    always ends with the final state."""
    start = clock()
    try:
        folder = outdir.claim(settings.out)
    except outdir.OutProblem as exc:
        raise UsageProblem(str(exc)) from None
    with folder, stop_signals():
        result = prepare(settings, prober, collector)
        needs = result.judge.needs
        progress(f"{result.judge.describe()}; {result.level_method}; a verdict needs at least "
                 f"{needs} pairs; {len(result.cells)} cell(s)")
        try:
            measure_pairs(result, runner, progress, clock, start)
        except KeyboardInterrupt as exc:
            result.status, result.stop_signal = "interrupted", exit_code_of(exc) - 128
            name = signal.Signals(result.stop_signal).name
            result.reason = (f"interrupted ({name}) during pair {len(result.pairs) + 1}; "
                             f"that pair is discarded, the {len(result.pairs)} finished pair(s) are reported")
        except ResultsError as exc:
            result.status, result.reason = "failed", f"a results file could not be read: {exc}"
        except Exception as exc:  # noqa: BLE001 - whatever it was, the run ends as failed and says why
            result.status, result.reason = "failed", f"unexpected error: {type(exc).__name__}: {exc}"
        if result.status == "running":
            result.status = "done"
        result.elapsed_s = clock() - start
        write_json(result, result.elapsed_s)
    return result


def measure_pairs(result: AbResult, runner: Runner, progress: Progress, clock: Callable[[], float],
                  start: float) -> None:
    """Pairs until every cell is settled or failed, a budget is spent, or an environment fails."""
    settings = result.settings
    envs = {"A": settings.a, "B": settings.b}
    skip = [n for ids in result.only_in.values() for n in ids]
    while measuring(result):
        index = len(result.pairs) + 1
        if stop := budget_spent(result, index, clock() - start):
            result.status, result.reason = "budget", stop
            return
        deselect = [f"--deselect={c.nodeid}" for c in result.cells.values() if c not in measuring(result)]
        deselect += [f"--deselect={nodeid}" for nodeid in skip]
        args = [*settings.run_args(), *deselect]
        stems = {label: settings.out.resolve() / f"pair-{index:03d}-{label}" for label in envs}
        if result.design in ("resident", "duet"):  # both processes at once (docs/ab.md, "Designs")
            runs = run_resident(envs, args, stems, order_of(index), list(result.cells), settings.process_timeout_s,
                                duet=result.design == "duet")
        else:
            runs = {}
            for label in order_of(index):
                runs[label] = runner(envs[label], args, stems[label], timeout_s=settings.process_timeout_s)
                if runs[label].crashed:  # the pair is lost anyway: don't spend the other side's process
                    break
        pair = Pair(index, order_of(index), runs, _load())
        result.pairs.append(pair)
        if crashed := [r for r in runs.values() if r.crashed]:
            result.status = "failed"
            result.reason = "; ".join(crash_reason(r, index, settings) for r in crashed)
            return
        if problem := check_identity(result, pair):
            result.status, result.reason = "failed", problem
            return
        absorb(result, pair)
        progress(progress_line(result, pair, clock() - start))
        write_json(result, clock() - start)
    result.status = "done"


def crash_reason(run: SideRun, index: int, settings: Settings) -> str:
    if run.timed_out:
        return (f"environment {run.label}'s process in pair {index} ran past {settings.process_timeout_s / 60:g} min "
                f"(--process-minutes, default --max-minutes) and was stopped with its process group: "
                f"{run.log_tail()[-1500:]}")
    return (f"environment {run.label} failed to run in pair {index} (pytest exit {run.returncode}): "
            f"{run.log_tail()[-1500:]}")


def budget_spent(result: AbResult, index: int, elapsed_s: float) -> str:
    s = result.settings
    if index > s.max_pairs:
        return f"--max-pairs {s.max_pairs} spent"
    if s.max_minutes is not None and result.pairs:
        per_pair = statistics.mean(sum(r.seconds for r in p.runs.values()) for p in result.pairs)
        if elapsed_s + per_pair > s.max_minutes * 60:
            return (f"--max-minutes {s.max_minutes:g}: {elapsed_s / 60:.1f} min spent, and a pair takes about "
                    f"{per_pair / 60:.1f} min")
    elif s.max_minutes is not None and elapsed_s >= s.max_minutes * 60:
        return f"--max-minutes {s.max_minutes:g} spent before the first pair"
    return ""


def _load() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def progress_line(result: AbResult, pair: Pair, elapsed_s: float) -> str:
    sides = " ".join(f"{label} {pair.runs[label].seconds:.0f}s" for label in pair.order)
    parts = []
    for cell in result.cells.values():
        head = next((m for m in cell.metrics.values() if m.deciding and m.interval is not None), None)
        if head is None or head.interval is None:
            parts.append(f"{cell.id}: {cell.verdict.value}")
            continue
        est, low, high = (ab_stats.relative(x) for x in (head.interval.estimate, head.interval.low, head.interval.high))
        parts.append(f"{cell.id}: {head.metric} {est:+.1%} [{low:+.1%}, {high:+.1%}] {cell.verdict.value}")
    load = f" load {pair.load_avg_1m}" if pair.load_avg_1m is not None else ""
    return f"[pair {pair.index}/{result.settings.max_pairs}] {sides}{load} {elapsed_s / 60:.1f} min | " + " | ".join(parts)


def write_json(result: AbResult, elapsed_s: float) -> Path:
    """``OUT/ab.json``, rewritten atomically after every pair (an interrupted run keeps what it measured)."""
    import json

    result.elapsed_s = elapsed_s
    path = result.settings.out / "ab.json"
    atomic_write_text(path, json.dumps(result.to_dict(), indent=1) + "\n")
    return path
