"""Per-cell changes of every metric between two runs, with the gate's verdicts, as tables.

A is the reference (a baseline or an earlier results file), B the new run.
:func:`compare_files` judges every cell of B; :func:`render_rich` prints the
terminal tables and :func:`render_compare_markdown` the same for a CI job summary.
The gate options (``--batchperf-k``, ``--batchperf-tolerance``) are built here
for the pytest plugin and every command that judges (compare, refresh).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from batchperf.regress import verdict as table
from batchperf.regress.gate import GateConfig, compare_cell, relative_change
from batchperf.regress.machine import MODES, machine_moved, session_probes
from batchperf.regress.store import fingerprint_of
from batchperf.regress.verdict import CellVerdict, Verdict, count_line, fmt_change, fmt_value
from batchperf.results.io import ResultsFile


def add_gate_args(parser: Any, machine_moved: bool = True) -> None:
    """Tolerance overrides shared by `batchperf compare`, `batchperf refresh` and the pytest plugin; ``machine_moved``:
    also ``--batchperf-machine-moved`` (not for refresh: a regression is never pinned as not judged)."""
    add = parser.addoption if hasattr(parser, "addoption") else parser.add_argument
    add("--batchperf-k", dest="batchperf_k", type=float, default=None, metavar="K",
        help="tolerance in units of the baseline's round-to-round spread (default 3)")
    add("--batchperf-tolerance", dest="batchperf_tolerance", action="append", default=[], metavar="METRIC=FRAC",
        help="floor for a metric, e.g. p99_e2el_ms=0.3 or output_throughput=0.1 (repeatable)")
    if not machine_moved:
        return
    add("--batchperf-machine-moved", dest="batchperf_machine_moved", choices=MODES, default="mark",
        help="a regression while the machine's own probe measured slower than the baseline's by more than the "
             "cell's tolerance: mark it with a note (default), or treat it as not judged (docs/baselines.md)")


def gate_config(k: float | None, tolerances: list[str], machine_moved: str = "mark") -> GateConfig:
    """The gate's config with command-line overrides applied; ValueError names a bad entry."""
    config = GateConfig(machine_moved=machine_moved) if k is None else GateConfig(k=k, machine_moved=machine_moved)
    for entry in tolerances:
        metric, sep, value = entry.partition("=")
        try:
            fraction = float(value)
        except ValueError:
            fraction = math.nan
        if not sep or not metric or math.isnan(fraction):
            raise ValueError(f"tolerance {entry!r}: expected METRIC=FRACTION, e.g. p99_e2el_ms=0.3")
        config = config.with_floor(metric.strip(), fraction)
    return config


def compare_files(a: ResultsFile, b: ResultsFile, config: GateConfig) -> list[CellVerdict]:
    """One verdict per cell of B; a cell only in A is *failed*: B lost it."""
    verdicts = []
    fp_a, fp_b = fingerprint_of(a), fingerprint_of(b)
    probes_a, probes_b = session_probes(a), session_probes(b)
    for name, rec in sorted(b.cells.items()):
        base = a.find(name, rec.id)
        verdict = compare_cell(rec.id, base, rec, config, fp_a, fp_b)
        verdicts.append(machine_moved(verdict, rec, probes_a, probes_b, config.machine_moved, base))
    for name in sorted(a.cells.keys() - b.cells.keys()):
        cell_id = a.cell_ids[name]
        if not any(v.name == cell_id for v in verdicts):
            why = f"missing: in {a.path.name}, not in {b.path.name}"
            verdicts.append(CellVerdict(cell_id, Verdict.FAILED, notes=(why,)))
    return verdicts


def extra_rows(a: ResultsFile, b: ResultsFile, verdict: CellVerdict, config: GateConfig) -> list[tuple[str, ...]]:
    """Ungated numeric metrics of one cell, as table rows without a verdict."""
    gated = {r.path for r in config.rules}
    cur = next((rec for rec in b.cells.values() if rec.id == verdict.name), None)
    base = next((rec for rec in a.cells.values() if rec.id == verdict.name), None)
    if cur is None or base is None:
        return []
    rows = []
    for key, value in sorted(cur.metrics.items()):
        old = base.metrics.get(key)
        if f"metrics.{key}" in gated or old is None:
            continue
        rows.append((key, fmt_value(old), fmt_value(value), fmt_change(relative_change(old, value)), "", ""))
    return rows


def make_console() -> Any:
    """A rich console that never wraps a line: logs and CI summaries stay greppable."""
    import sys

    from rich.console import Console

    return Console(soft_wrap=True, width=None if sys.stdout.isatty() else 200)


def render_rich(verdicts: list[CellVerdict], console: Any, extras: dict[str, list[tuple[str, ...]]] | None = None,
                title: str = "") -> None:
    table.render_rich(verdicts, console, extras=extras)
    console.print((title + ": " if title else "") + count_line(verdicts), highlight=False)


def render_compare_markdown(verdicts: list[CellVerdict], a: Path, b: Path,
                            extras: dict[str, list[tuple[str, ...]]] | None = None) -> str:
    lines = [f"## batchperf compare: `{a}` → `{b}`", "",
             ", ".join(f"**{n}** {v.value}" for v, n in table.counts(verdicts).items()), ""]
    return "\n".join(lines + table.render_verdicts_markdown(verdicts, extras=extras, sort=True))
