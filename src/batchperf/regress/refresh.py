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

import argparse
import datetime as dt
import fnmatch
import getpass
import socket
import subprocess
import sys
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from batchperf.regress.store import (
    BASELINE_FILE, DEFAULT_ROOT, BaselineError, RunFile, baseline_entry, folder_for, load_baseline, load_results,
    locked, pool_runs, repair_history, stale_temporaries, write_baseline,
)
from batchperf.regress.compare import add_gate_args, gate_config, make_console, render_rich
from batchperf.regress.gate import CellVerdict, GateConfig, Verdict, compare_cell


class RefreshRefused(Exception):
    """The refresh would store something it should not; the message says why and which flag allows it."""


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results", nargs="*", type=Path,
                        help="results JSON written by pytest --benchmark-json; several runs of the same cells are "
                             "pooled (their rounds together), so the baseline carries their run-to-run spread")
    parser.add_argument("--run", nargs=argparse.REMAINDER, metavar="PYTEST_ARGS",
                        help="run pytest with these arguments first and refresh from its results (put it last)")
    parser.add_argument("--repeat", type=int, default=1, metavar="N", help="with --run: run N times and pool them")
    parser.add_argument("--reason", default=None, help="why the baseline changes (recorded in the history)")
    parser.add_argument("--baselines", type=Path, default=DEFAULT_ROOT, help="baselines root (default: baselines)")
    parser.add_argument("--cells", action="append", default=[], metavar="GLOB",
                        help="only these cells (glob on cell id or test name; repeatable); others keep their entries")
    parser.add_argument("--accept-regression", action="store_true", help="store cells that regressed (needs --reason)")
    parser.add_argument("--allow-failed", action="store_true", help="leave failed cells out instead of refusing")
    parser.add_argument("--allow-dirty", action="store_true", help="accept results measured on a dirty git tree")
    parser.add_argument("--partial", action="store_true",
                        help="accept results missing some cells of the old baseline (they keep their old entries)")
    parser.add_argument("--dry-run", action="store_true", help="show the diff and the checks; write nothing")
    add_gate_args(parser)


@dataclass(slots=True)
class Plan:
    """What a refresh would do, before anything is written."""

    results: RunFile
    old: RunFile | None
    verdicts: list[CellVerdict]
    selected: dict[str, dict[str, Any]]  # fullname -> results entry to store
    failed: dict[str, str] = field(default_factory=dict)  # fullname -> why
    not_covered: list[str] = field(default_factory=list)  # old cells absent from the results

    @property
    def regressions(self) -> list[str]:
        return [v.name for v in self.verdicts if v.failed]


def cell_failure(info: dict[str, Any]) -> str | None:
    """Why a results cell must not become a baseline, or None."""
    metrics = info.get("metrics", {})
    if info.get("token_count_errors"):
        return f"{len(info['token_count_errors'])} request(s) missed their token target"
    if metrics.get("failed"):
        return f"{metrics['failed']} request(s) failed"
    if not metrics.get("completed"):
        return "no request completed"
    if not info.get("rounds"):
        return "no per-round metrics (extra_info.rounds)"
    return None


def _selected(name: str, info: dict[str, Any], globs: list[str]) -> bool:
    return not globs or any(fnmatch.fnmatch(info["cell"].get("id", ""), g) or fnmatch.fnmatch(name, g) for g in globs)


def plan_refresh(results: RunFile, old: RunFile | None, config: GateConfig, cells: list[str]) -> Plan:
    chosen = {n: e for n, e in results.entries.items() if _selected(n, e["extra_info"], cells)}
    if not chosen:
        raise RefreshRefused(f"no cell of {results.path} matches --cells {' '.join(cells)}")
    failed = {n: why for n, e in chosen.items() if (why := cell_failure(e["extra_info"]))}
    verdicts = []
    for name, entry in sorted(chosen.items()):
        info = entry["extra_info"]
        base = old.find(name, info["cell"].get("id")) if old else None
        verdicts.append(compare_cell(info["cell"].get("id", name), base, info, config,
                                     old.fingerprint if old else None, results.fingerprint))
    not_covered = [] if cells or old is None else sorted(old.cell_ids[n] for n in old.entries.keys() - chosen.keys())
    return Plan(results, old, verdicts, chosen, failed, not_covered)


def check_plan(plan: Plan, args: argparse.Namespace) -> list[str]:
    """Every refusal that applies (empty: go ahead)."""
    refusals = []
    if plan.failed and not args.allow_failed:
        refusals.append(f"{len(plan.failed)} failed cell(s): "
                        + "; ".join(f"{plan.results.cell_ids[n]}: {why}" for n, why in sorted(plan.failed.items()))
                        + " (fix them, or --allow-failed to leave them out)")
    regressed = [name for name in plan.regressions
                 if name not in {plan.results.cell_ids[n] for n in plan.failed}]
    if regressed and not (args.accept_regression and args.reason):
        refusals.append(f"{len(regressed)} cell(s) regressed against the current baseline: {', '.join(regressed)} "
                        f"(store them only with --accept-regression --reason \"why this is intended\")")
    if plan.not_covered and not args.partial:
        refusals.append(f"incomplete run: {len(plan.not_covered)} cell(s) of the baseline are not in the results: "
                        f"{', '.join(plan.not_covered[:8])}{' …' if len(plan.not_covered) > 8 else ''} "
                        "(run them too, or --partial to keep their old entries)")
    dirty = (plan.results.data.get("commit_info") or {}).get("dirty")
    if dirty is None:
        dirty = git_dirty()
    if dirty and not args.allow_dirty:
        refusals.append("the results were measured on a dirty git tree: the baseline would not match any commit "
                        "(commit first, or --allow-dirty)")
    if plan.old is not None and not args.reason:
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


def provenance(plan: Plan, args: argparse.Namespace, stored: list[str]) -> dict[str, Any]:
    commit = plan.results.data.get("commit_info") or {}
    fp = plan.results.fingerprint
    return {
        "id": uuid.uuid4().hex,
        "time": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "user": getpass.getuser(),
        "host": socket.gethostname(),
        "reason": args.reason or "initial baseline",
        "results": [{"file": f, "sha256": sha} for f, sha in plan.results.sources],
        "results_commit": {k: commit.get(k) for k in ("id", "branch", "dirty", "time")},
        "tool_commit": _git("rev-parse", "HEAD"),
        "versions": dict(fp.upgrade) if fp else {},
        "cells": stored,
        "accepted_regressions": [n for n in plan.regressions if n in stored],
        "left_out_failed": sorted(plan.results.cell_ids[n] for n in plan.failed),
        "injected": dict(fp.soft.get("injected", {})) if fp else {},
        "flags": {k: bool(getattr(args, k)) for k in ("accept_regression", "allow_failed", "allow_dirty", "partial")},
    }


def run_pytest(pytest_args: list[str], out: Path) -> int:
    cmd = [sys.executable, "-m", "pytest", *pytest_args, f"--benchmark-json={out}"]
    print("running:", " ".join(cmd), flush=True)
    return subprocess.run(cmd, check=False).returncode


def refresh(args: argparse.Namespace, results_paths: list[Path], console: Any) -> int:
    config = gate_config(args.batchperf_k, args.batchperf_tolerance)
    runs = [load_results(p) for p in results_paths]
    for run in runs:
        if run.fingerprint is None:
            raise BaselineError(run.path, "has no batchperf fingerprint (machine_info.batchperf)",
                                "Run the cells with the batchperf pytest plugin active so the file records its hardware")
    results = pool_runs(runs)
    results_label = ", ".join(str(p) for p in results_paths)
    folder = folder_for(args.baselines, results.fingerprint)
    with locked(folder):
        for tmp in stale_temporaries(folder):
            console.print(f"note: removing {tmp}, left by an interrupted refresh (the baseline itself is intact)")
            tmp.unlink()
        if (recovered := repair_history(folder)) is not None:
            console.print(f"note: history was missing the current baseline's entry {recovered['id']}; appended it")
        path = folder / BASELINE_FILE
        old = load_baseline(path, results.fingerprint) if path.exists() else None
        plan = plan_refresh(results, old, config, args.cells)
        render_rich(plan.verdicts, console, title=f"{path} ← {results_label}")
        if injected := results.fingerprint.soft.get("injected"):
            console.print("[bold yellow]warning:[/bold yellow] these results were measured with an injected slowdown ("
                          + ", ".join(f"{k}={v}" for k, v in sorted(injected.items())) + "); the history records it")
        refusals = check_plan(plan, args)
        if refusals:
            console.print("[bold red]refresh refused; nothing was written:[/bold red]")
            for r in refusals:
                console.print(f"  - {r}")
            return 2
        store = {n: e for n, e in plan.selected.items() if n not in plan.failed}
        keep = {} if old is None else {n: e for n, e in old.entries.items() if n not in store}  # incl. failed cells
        entries = [*keep.values(), *(baseline_entry(e) for e in store.values())]
        stored = sorted(plan.results.cell_ids[n] for n in store)
        if args.dry_run:
            console.print(f"dry run: would write {len(entries)} cell(s) to {path} ({len(stored)} from the results)")
            return 0
        prov = provenance(plan, args, stored)
        write_baseline(folder, results.data, entries, results.fingerprint, prov)
        console.print(f"wrote {path}: {len(entries)} cell(s), {len(stored)} refreshed; history entry {prov['id']}")
    return 0


def main(args: argparse.Namespace) -> int:
    console = make_console()
    if args.accept_regression and not args.reason:
        raise SystemExit("batchperf refresh: --accept-regression needs --reason \"why the regression is intended\"")
    if bool(args.results) == (args.run is not None):
        raise SystemExit("batchperf refresh: give results JSON file(s) or --run PYTEST_ARGS (one of the two)")
    if args.repeat < 1:
        raise SystemExit(f"batchperf refresh: --repeat must be >= 1, got {args.repeat}")
    try:
        if args.run is None:
            return refresh(args, args.results, console)
        with tempfile.TemporaryDirectory(prefix="batchperf-refresh-") as tmp:
            outs = []
            for i in range(args.repeat):
                out = Path(tmp) / f"results-{i}.json"
                rc = run_pytest(args.run, out)
                if not out.exists():
                    raise SystemExit(f"batchperf refresh: pytest exited {rc} without writing results; "
                                     "nothing was written")
                if rc not in (0, 1) and not args.partial:  # 2: interrupted, 3+: internal/usage errors
                    raise SystemExit(f"batchperf refresh: pytest exited {rc} (interrupted or broken): the run is "
                                     "incomplete; nothing was written (--partial stores what it has)")
                outs.append(out)
            return refresh(args, outs, console)
    except (BaselineError, RefreshRefused, ValueError) as exc:
        raise SystemExit(f"batchperf refresh: {exc}") from None
