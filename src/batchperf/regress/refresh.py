"""``batchperf refresh``: pin a reviewed run as this hardware's baseline.

It takes a results JSON (or runs the selected cells first with ``--run``),
shows old vs new per metric per cell, and writes ``baselines/<fingerprint>/
baseline.json`` atomically under a lock, appending provenance (versions,
commits, time, user, reason, sha256 of the raw results) to ``history.jsonl``.
It refuses, unless told: a regression (``--accept-regression --reason``), failed
cells (``--allow-failed``: they are left out), a dirty tree (``--allow-dirty``)
and a run that does not cover every cell of the old baseline (``--partial``:
the missing cells keep their old entries).
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import getpass
import socket
import subprocess
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from batchperf.launch.child import run_guarded
from batchperf.launch.suite import suite_command
from batchperf.regress.compare import gate_config, render_rich
from batchperf.regress.fingerprint import Fingerprint, identity_diff, version_diff
from batchperf.regress.gate import GateConfig, compare_cell
from batchperf.regress.judgeable import client_bound_note
from batchperf.regress.store import (
    BASELINE_FILE,
    DEFAULT_ROOT,
    append_history,
    baseline_record,
    fingerprint_of,
    folder_for,
    load_baseline,
    load_run,
    locked,
    missing_history_entry,
    pool_runs,
    write_baseline,
)
from batchperf.regress.verdict import CellVerdict
from batchperf.results.io import ResultsFile, temporaries
from batchperf.results.record import CellRecord, ResultsError
from batchperf.telemetry.gpu_clocks import void_reason


class RefreshRefused(Exception):
    """The refresh would store something it should not; the message says why and which flag allows it."""


# The overrides provenance records as "flags": what the person allowed, beside the reason they gave.
FLAGS = ("accept_regression", "allow_failed", "allow_dirty", "partial")


@dataclass(frozen=True, slots=True)
class RefreshRequest:
    """How to refresh: where the baselines are, why, which cells, and which refusals are overridden."""

    baselines: Path = DEFAULT_ROOT
    reason: str | None = None  # recorded in the history; replacing a baseline needs one
    cells: tuple[str, ...] = ()  # globs on cell id or test name; empty: every cell of the results
    accept_regression: bool = False  # store cells that regressed (needs a reason)
    allow_failed: bool = False  # leave failed cells out instead of refusing
    allow_dirty: bool = False  # accept results measured on a dirty git tree
    partial: bool = False  # accept results that miss cells of the old baseline, or an interrupted run
    dry_run: bool = False  # show the diff and the checks; write nothing
    k: float | None = None  # the gate's tolerance overrides, as :func:`gate_config` takes them
    tolerances: tuple[str, ...] = ()  # METRIC=FRACTION

    def __post_init__(self) -> None:
        if not isinstance(self.baselines, Path):
            raise ValueError(f"baselines must be a Path, got {type(self.baselines).__name__}")
        for name in ("cells", "tolerances"):
            value = getattr(self, name)
            # a bare string would be read one character at a time, each a glob or a METRIC=FRACTION
            if not isinstance(value, tuple) or not all(isinstance(v, str) for v in value):
                raise ValueError(f"{name} must be a tuple of strings, got {value!r}")
        if self.accept_regression and not self.reason:
            raise ValueError("accept_regression needs a reason (why the regression is intended)")


@dataclass(slots=True)
class Plan:
    """What a refresh would do, before anything is written."""

    results: ResultsFile
    old: ResultsFile | None
    verdicts: list[CellVerdict]
    selected: dict[str, CellRecord]  # fullname -> results cell to store
    failed: dict[str, str] = field(default_factory=dict)  # fullname -> why
    not_covered: list[str] = field(default_factory=list)  # old cells absent from the results

    @property
    def regressions(self) -> list[str]:
        return [v.name for v in self.verdicts if v.failed]

    @property
    def client_bound(self) -> dict[str, str]:
        """Cells to be stored whose client, not their server, set their latencies: id -> why. Pinned, the gate can
        never judge those latencies (nor, where the server was underfed, the throughput) against them."""
        return {rec.id: note for n, rec in sorted(self.selected.items())
                if n not in self.failed and (note := client_bound_note(rec, "these results"))}

    @property
    def kept(self) -> list[str]:
        """Cells of the old baseline that keep their old entries (not in the results, not selected, or failed)."""
        if self.old is None:
            return []
        stored = self.selected.keys() - self.failed.keys()
        return sorted(self.old.cell_ids[n] for n in self.old.cells if n not in stored)

    @property
    def kept_identity_diff(self) -> list[str]:
        """How the identity the kept cells were measured with differs from the results' (empty: the same)."""
        old, new = self._fingerprints()
        if old is None or new is None:
            return []
        return identity_diff(old.identity.to_dict(), new.identity.to_dict())

    @property
    def kept_versions(self) -> dict[str, tuple[str, str]]:
        """Upgrade axes the kept cells were measured with that differ from the results': name -> (kept, new)."""
        old, new = self._fingerprints()
        if old is None or new is None:
            return {}
        return version_diff(old.upgrade, new.upgrade)

    def _fingerprints(self) -> tuple[Fingerprint | None, Fingerprint | None]:
        """(the old baseline's, the results'); None where there is none."""
        return (None if self.old is None else fingerprint_of(self.old)), fingerprint_of(self.results)


def cell_failure(record: CellRecord) -> str | None:
    """Why a results cell must not become a baseline, or None."""
    metrics = record.metrics
    if record.token_count_errors:
        return f"{len(record.token_count_errors)} request(s) missed their token target"
    if metrics.get("failed"):
        return f"{metrics['failed']:g} request(s) failed"
    if not metrics.get("completed"):
        return "no request completed"
    if not record.rounds:
        return "no per-round metrics (extra_info.rounds)"
    if why := void_reason(record.telemetry):  # the card's state, not the code's: never a baseline
        return f"void, its GPU did not hold its clocks: {why}"
    return None


def _selected(name: str, record: CellRecord, globs: tuple[str, ...]) -> bool:
    return not globs or any(fnmatch.fnmatch(record.id, g) or fnmatch.fnmatch(name, g) for g in globs)


def plan_refresh(results: ResultsFile, old: ResultsFile | None, config: GateConfig, cells: tuple[str, ...]) -> Plan:
    chosen = {n: rec for n, rec in results.cells.items() if _selected(n, rec, cells)}
    if not chosen:
        raise RefreshRefused(f"no cell of {results.path} matches --cells {' '.join(cells)}")
    failed = {n: why for n, rec in chosen.items() if (why := cell_failure(rec))}
    verdicts = []
    old_fp, new_fp = (fingerprint_of(old) if old else None), fingerprint_of(results)
    for name, rec in sorted(chosen.items()):
        base = old.find(name, rec.id) if old else None
        verdicts.append(compare_cell(rec.id, base, rec, config, old_fp, new_fp))
    not_covered = [] if cells or old is None else sorted(old.cell_ids[n] for n in old.cells.keys() - chosen.keys())
    return Plan(results, old, verdicts, chosen, failed, not_covered)


def check_plan(plan: Plan, request: RefreshRequest) -> list[str]:
    """Every refusal that applies (empty: go ahead)."""
    refusals = []
    if plan.failed and not request.allow_failed:
        refusals.append(f"{len(plan.failed)} failed cell(s): "
                        + "; ".join(f"{plan.results.cell_ids[n]}: {why}" for n, why in sorted(plan.failed.items()))
                        + " (fix them, or --allow-failed to leave them out)")
    regressed = [name for name in plan.regressions
                 if name not in {plan.results.cell_ids[n] for n in plan.failed}]
    if regressed and not (request.accept_regression and request.reason):
        refusals.append(f"{len(regressed)} cell(s) regressed against the current baseline: {', '.join(regressed)} "
                        f"(store them only with --accept-regression --reason \"why this is intended\")")
    if plan.kept and (diff := plan.kept_identity_diff):
        # A baseline has one fingerprint: kept cells would be stamped with an identity they were not measured with,
        # and a later comparison would trust them (issue 14).
        refusals.append(f"{len(plan.kept)} cell(s) of the baseline would be kept ({', '.join(plan.kept[:4])}"
                        f"{' …' if len(plan.kept) > 4 else ''}), measured with another identity than these results "
                        f"({'; '.join(diff)}); a baseline holds one identity: measure every cell of it this way "
                        "(no --partial, --cells or --allow-failed), or refresh into another --baselines folder")
    if (why := plan.results.incomplete) and not request.partial:
        refusals.append(f"the results are from an incomplete run ({why}): run the cells again, or --partial to "
                        "store the cells that finished (the others keep their old entries)")
    if plan.not_covered and not request.partial:
        refusals.append(f"incomplete run: {len(plan.not_covered)} cell(s) of the baseline are not in the results: "
                        f"{', '.join(plan.not_covered[:8])}{' …' if len(plan.not_covered) > 8 else ''} "
                        "(run them too, or --partial to keep their old entries)")
    dirty = plan.results.commit_info.get("dirty")
    if dirty is None:
        dirty = git_dirty()
    if dirty and not request.allow_dirty:
        refusals.append("the results were measured on a dirty git tree: the baseline would not match any commit "
                        "(commit first, or --allow-dirty)")
    if plan.old is not None and not request.reason:
        refusals.append("replacing a baseline needs --reason \"...\" (it goes into the history)")
    return refusals


def _git(*cmd: str) -> str | None:
    try:
        out = subprocess.run(["git", *cmd], capture_output=True, text=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def git_dirty() -> bool | None:
    status = _git("status", "--porcelain", "--untracked-files=no")
    return None if status is None else bool(status)


def provenance(plan: Plan, request: RefreshRequest, stored: list[str]) -> dict[str, Any]:
    commit = plan.results.commit_info
    fp = fingerprint_of(plan.results)
    return {
        "id": uuid.uuid4().hex,
        "time": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "user": getpass.getuser(),
        "host": socket.gethostname(),
        "reason": request.reason or "initial baseline",
        "results": [{"file": f, "sha256": sha} for f, sha in plan.results.sources],
        "results_commit": {k: commit.get(k) for k in ("id", "branch", "dirty", "time")},
        "tool_commit": _git("rev-parse", "HEAD"),
        "versions": dict(fp.upgrade) if fp else {},
        "cells": stored,
        "accepted_regressions": [n for n in plan.regressions if n in stored],
        # cells kept from the old baseline, measured with other versions than the fingerprint now says
        **({"kept_measured_with": {k: a for k, (a, _) in plan.kept_versions.items()}}
           if plan.kept and plan.kept_versions else {}),
        "left_out_failed": sorted(plan.results.cell_ids[n] for n in plan.failed),
        "injected": dict(fp.soft.get("injected", {})) if fp else {},
        **({"client_bound": sorted(bound)} if (bound := plan.client_bound) else {}),
        "flags": {k: bool(getattr(request, k)) for k in FLAGS},
    }


def run_pytest(pytest_args: list[str], out: Path) -> int:
    """pytest's exit code; under the group guard, so that SIGINT/SIGTERM to this process (inside
    :func:`~batchperf.launch.child.stop_signals`) stop its whole group and raise ``Stopped``, and its death takes
    pytest with it."""
    cmd = suite_command(pytest_args, results=out)
    print("running:", " ".join(cmd), flush=True)
    return run_guarded(cmd).returncode


def refresh(request: RefreshRequest, results_paths: list[Path], console: Any) -> int:
    config = gate_config(request.k, list(request.tolerances))
    runs = [load_run(p) for p in results_paths]
    fingerprints = [_measured_on(run) for run in runs]
    results = pool_runs(runs)
    fingerprint = fingerprints[0]  # the pooled run's: pool_runs keeps the first run's header
    folder = folder_for(request.baselines, fingerprint)
    if request.dry_run:  # reads only: no lock file, no folder, no repair; it says what a refresh would do
        return _refresh(request, results, fingerprint, results_paths, folder, config, console)
    with locked(folder):
        return _refresh(request, results, fingerprint, results_paths, folder, config, console)


def _measured_on(run: ResultsFile) -> Fingerprint:
    """The fingerprint a baseline made from ``run`` is filed under; ResultsError when the run has none."""
    if (fingerprint := fingerprint_of(run)) is None:
        raise ResultsError(run.path, "has no batchperf fingerprint (machine_info.batchperf)",
                           "Run the cells with the batchperf pytest plugin active so the file records its hardware")
    return fingerprint


def _refresh(request: RefreshRequest, results: ResultsFile, fingerprint: Fingerprint, results_paths: list[Path],
             folder: Path, config: GateConfig, console: Any) -> int:
    for tmp in temporaries(folder / BASELINE_FILE):
        if request.dry_run:
            console.print(f"dry run: would remove {tmp}, left by an interrupted refresh")
            continue
        console.print(f"note: removing {tmp}, left by an interrupted refresh (the baseline itself is intact)")
        tmp.unlink()
    if (recovered := missing_history_entry(folder)) is not None:
        if request.dry_run:
            console.print(f"dry run: would append the missing history entry {recovered['id']} of the current baseline")
        else:
            _notes(console, append_history(folder, recovered))
            console.print(f"note: history was missing the current baseline's entry {recovered['id']}; appended it")
    path = folder / BASELINE_FILE
    old = load_baseline(path, fingerprint) if path.exists() else None
    plan = plan_refresh(results, old, config, request.cells)
    render_rich(plan.verdicts, console, title=f"{path} ← {', '.join(str(p) for p in results_paths)}")
    if injected := fingerprint.soft.get("injected"):
        console.print("[bold yellow]warning:[/bold yellow] these results were measured with an injected slowdown ("
                      + ", ".join(f"{k}={v}" for k, v in sorted(injected.items())) + "); the history records it")
    if bound := plan.client_bound:
        console.print(f"[bold yellow]warning:[/bold yellow] {len(bound)} cell(s) were client-bound: their client, not "
                      "their server, set their latencies (and, where the server was underfed, their throughput), so "
                      "the gate will leave those metrics not judged against this baseline until it is refreshed "
                      "again; measure them on a quieter machine (or with fewer cells at once) before pinning them. "
                      "The history records it.")
        for cell, note in bound.items():
            console.print(f"  - {cell}: {note}")
    refusals = check_plan(plan, request)
    if refusals:
        console.print("[bold red]refresh refused; nothing was written:[/bold red]")
        for r in refusals:
            console.print(f"  - {r}")
        return 2
    if (versions := plan.kept_versions) and plan.kept:
        console.print(f"note: {len(plan.kept)} kept cell(s) were measured with "
                      + ", ".join(f"{k} {a}" for k, (a, _) in versions.items())
                      + "; the history records it (the baseline's fingerprint says "
                      + ", ".join(f"{k} {b}" for k, (_, b) in versions.items()) + ")")
    store = {n: rec for n, rec in plan.selected.items() if n not in plan.failed}
    keep = [] if old is None else [old.entry(n) for n in old.cells if n not in store]  # incl. failed cells
    entries = [*keep, *(results.entry(n, baseline_record(rec), with_traces=False) for n, rec in store.items())]
    stored = sorted(plan.results.cell_ids[n] for n in store)
    if request.dry_run:
        console.print(f"dry run: would write {len(entries)} cell(s) to {path} ({len(stored)} from the results)")
        return 0
    prov = provenance(plan, request, stored)
    _notes(console, write_baseline(folder, results.header, entries, fingerprint, prov))
    console.print(f"wrote {path}: {len(entries)} cell(s), {len(stored)} refreshed; history entry {prov['id']}")
    return 0


def _notes(console: Any, notes: list[str]) -> None:
    for note in notes:
        console.print(f"note: {note}")
