"""Per-cell changes of every metric between two runs, with the gate's verdicts, as tables.

A is the reference (a baseline or an earlier results file), B the new run.
:func:`compare_files` judges every cell of B; :func:`render_rich` prints the
terminal tables and :func:`render_markdown` the same for a CI job summary.
The gate options (``--batchperf-k``, ``--batchperf-tolerance``) are built here
for the pytest plugin and every command that judges (compare, refresh).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from batchperf.regress.gate import (
    TABLE_HEADER,
    CellVerdict,
    GateConfig,
    Verdict,
    compare_cell,
    fmt_change,
    fmt_value,
    relative_change,
    table_rows,
)
from batchperf.regress.store import fingerprint_of
from batchperf.results.io import ResultsFile

VERDICT_STYLE = {"REGRESSION": "bold red", "MISSING": "bold red", "improvement": "green", "ok": "",
                 "TOO NOISY": "yellow", "NOT JUDGED": "yellow"}
CELL_LABEL = {
    Verdict.PASS: "pass", Verdict.REGRESSION: "REGRESSION", Verdict.MISSING: "MISSING",
    Verdict.IMPROVEMENT: "improvement (refresh suggested)", Verdict.NO_BASELINE: "no comparable baseline",
    Verdict.NOISY: "too noisy to gate", Verdict.NOT_JUDGED: "not judged (bad baseline)",
}


def add_gate_args(parser: Any) -> None:
    """Tolerance overrides shared by `batchperf compare`, `batchperf refresh` and the pytest plugin."""
    add = parser.addoption if hasattr(parser, "addoption") else parser.add_argument
    add("--batchperf-k", dest="batchperf_k", type=float, default=None, metavar="K",
        help="tolerance in units of the baseline's round-to-round spread (default 3)")
    add("--batchperf-tolerance", dest="batchperf_tolerance", action="append", default=[], metavar="METRIC=FRAC",
        help="floor for a metric, e.g. p99_e2el_ms=0.3 or output_throughput=0.1 (repeatable)")


def gate_config(k: float | None, tolerances: list[str]) -> GateConfig:
    """The gate's config with command-line overrides applied; ValueError names a bad entry."""
    config = GateConfig() if k is None else GateConfig(k=k)
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
    """One verdict per cell of B; cells only in A are reported as missing from B."""
    verdicts = []
    fp_a, fp_b = fingerprint_of(a), fingerprint_of(b)
    for name, rec in sorted(b.cells.items()):
        verdicts.append(compare_cell(rec.id, a.find(name, rec.id), rec, config, fp_a, fp_b))
    for name in sorted(a.cells.keys() - b.cells.keys()):
        cell_id = a.cell_ids[name]
        if not any(v.name == cell_id for v in verdicts):
            verdicts.append(CellVerdict(cell_id, Verdict.MISSING, identity_diff=(f"in {a.path.name}, not in {b.path.name}",)))
    return verdicts


def extra_rows(a: ResultsFile, b: ResultsFile, verdict: CellVerdict, config: GateConfig) -> list[tuple[str, ...]]:
    """Ungated numeric metrics of one cell, as table rows without a verdict."""
    gated = {r.metric for r in config.rules}
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


def summary_counts(verdicts: Iterable[CellVerdict]) -> dict[Verdict, int]:
    counts: dict[Verdict, int] = {}
    for v in verdicts:
        counts[v.verdict] = counts.get(v.verdict, 0) + 1
    return counts


def make_console() -> Any:
    """A rich console that never wraps a line: logs and CI summaries stay greppable."""
    import sys

    from rich.console import Console

    return Console(soft_wrap=True, width=None if sys.stdout.isatty() else 200)


def render_rich(verdicts: list[CellVerdict], console: Any, extras: dict[str, list[tuple[str, ...]]] | None = None,
                title: str = "") -> None:
    from rich.table import Table

    for v in verdicts:
        head = f"{v.name}: {CELL_LABEL[v.verdict]}"
        if not v.metrics:
            console.print(f"[bold]{head}[/bold]" + "".join(f"\n  {d}" for d in v.identity_diff))
            continue
        table = Table(title=head, title_justify="left", show_edge=False, pad_edge=False)
        for i, col in enumerate(TABLE_HEADER):
            table.add_column(col, justify="left" if i == 0 else "right")
        for row in table_rows(v) + (extras or {}).get(v.name, []):
            table.add_row(*row, style=VERDICT_STYLE.get(row[-1], ""))
        console.print(table)
        for m in v.metrics:
            if m.note:
                console.print(f"  {m.name}: {m.note}")
        if v.versions:
            console.print("  versions that differ: " + ", ".join(f"{k} {a} → {b}" for k, (a, b) in v.versions.items()))
        for w in v.warnings:
            console.print(f"  note: {w}")
    counts = summary_counts(verdicts)
    console.print((title + ": " if title else "") + ", ".join(f"{n} {CELL_LABEL[k]}" for k, n in counts.items()))


def render_markdown(verdicts: list[CellVerdict], a: Path, b: Path,
                    extras: dict[str, list[tuple[str, ...]]] | None = None) -> str:
    counts = summary_counts(verdicts)
    lines = [f"## batchperf compare: `{a}` → `{b}`", "",
             ", ".join(f"**{n}** {CELL_LABEL[k]}" for k, n in counts.items()), ""]
    order = {Verdict.REGRESSION: 0, Verdict.MISSING: 0, Verdict.NOT_JUDGED: 1, Verdict.NOISY: 1,
             Verdict.IMPROVEMENT: 2, Verdict.NO_BASELINE: 3, Verdict.PASS: 4}
    for v in sorted(verdicts, key=lambda v: (order[v.verdict], v.name)):
        icon = {Verdict.REGRESSION: "❌", Verdict.MISSING: "❌", Verdict.IMPROVEMENT: "⬆️", Verdict.NOISY: "⚠️",
                Verdict.NOT_JUDGED: "⚠️", Verdict.NO_BASELINE: "❔"}.get(v.verdict, "✅")
        lines.append(f"### {icon} `{v.name}`: {CELL_LABEL[v.verdict]}")
        lines.append("")
        if not v.metrics:
            lines += [f"- {d}" for d in v.identity_diff] + [""]
            continue
        lines.append("| " + " | ".join(TABLE_HEADER) + " |")
        lines.append("|" + "---|" + "---:|" * (len(TABLE_HEADER) - 1))
        for row in table_rows(v) + (extras or {}).get(v.name, []):
            cells = [f"**{c}**" if row[-1] in ("REGRESSION", "MISSING") and c else c for c in row]
            lines.append("| " + " | ".join(cells) + " |")
        lines += [f"\n- `{m.name}`: {m.note}" for m in v.metrics if m.note]
        if v.versions:
            lines.append("")
            lines.append("Versions that differ: " + ", ".join(f"{k} {a} → {b}" for k, (a, b) in v.versions.items()))
        lines.append("")
    return "\n".join(lines)
