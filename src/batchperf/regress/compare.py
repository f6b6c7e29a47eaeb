"""``batchperf compare A.json B.json``: per-cell changes of every metric with the gate's verdicts.

A is the reference (a baseline or an earlier results file), B the new run. It
prints a terminal table (rich) and, with ``--markdown``, the same as Markdown
for a CI job summary (``--markdown "$GITHUB_STEP_SUMMARY"``).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from batchperf.regress.store import BaselineError, RunFile, load_results
from batchperf.regress.gate import (
    TABLE_HEADER, CellVerdict, GateConfig, Verdict, compare_cell, fmt_change, fmt_value, relative_change, table_rows,
)

VERDICT_STYLE = {"REGRESSION": "bold red", "MISSING": "bold red", "improvement": "green", "ok": ""}
CELL_LABEL = {
    Verdict.PASS: "pass", Verdict.REGRESSION: "REGRESSION", Verdict.MISSING: "MISSING",
    Verdict.IMPROVEMENT: "improvement (refresh suggested)", Verdict.NO_BASELINE: "no comparable baseline",
}


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("a", type=Path, metavar="A.json", help="reference: a baseline.json or a results file")
    parser.add_argument("b", type=Path, metavar="B.json", help="the new results file")
    parser.add_argument("--markdown", nargs="?", const="-", default=None, metavar="FILE",
                        help="also write Markdown (to FILE, appended; '-' or no value: stdout)")
    parser.add_argument("--all-metrics", action="store_true",
                        help="also list every other numeric metric (no verdict: the gate does not judge it)")
    parser.add_argument("--fail-on-regression", action="store_true", help="exit 1 when any cell regressed")
    add_gate_args(parser)


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


def compare_files(a: RunFile, b: RunFile, config: GateConfig) -> list[CellVerdict]:
    """One verdict per cell of B; cells only in A are reported as missing from B."""
    verdicts = []
    for name, entry in sorted(b.entries.items()):
        info = entry["extra_info"]
        base = a.find(name, info["cell"].get("id"))
        verdicts.append(compare_cell(info["cell"].get("id", name), base, info, config, a.fingerprint, b.fingerprint))
    for name in sorted(a.entries.keys() - b.entries.keys()):
        cell_id = a.cell_ids[name]
        if not any(v.name == cell_id for v in verdicts):
            verdicts.append(CellVerdict(cell_id, Verdict.MISSING, identity_diff=(f"in {a.path.name}, not in {b.path.name}",)))
    return verdicts


def extra_rows(a: RunFile, b: RunFile, verdict: CellVerdict, config: GateConfig) -> list[tuple[str, ...]]:
    """Ungated numeric metrics of one cell, as table rows without a verdict."""
    gated = {r.metric for r in config.rules}
    by_id = {info["extra_info"]["cell"].get("id"): info["extra_info"] for info in b.entries.values()}
    cur = by_id.get(verdict.name)
    base = next((e["extra_info"] for e in a.entries.values() if e["extra_info"]["cell"].get("id") == verdict.name), None)
    if cur is None or base is None:
        return []
    rows = []
    for key, value in sorted(cur["metrics"].items()):
        old = base["metrics"].get(key)
        if f"metrics.{key}" in gated or not isinstance(value, (int, float)) or not isinstance(old, (int, float)):
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
    order = {Verdict.REGRESSION: 0, Verdict.MISSING: 0, Verdict.IMPROVEMENT: 1, Verdict.NO_BASELINE: 2, Verdict.PASS: 3}
    for v in sorted(verdicts, key=lambda v: (order[v.verdict], v.name)):
        icon = {Verdict.REGRESSION: "❌", Verdict.MISSING: "❌", Verdict.IMPROVEMENT: "⬆️"}.get(v.verdict, "✅")
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
        if v.versions:
            lines.append("")
            lines.append("Versions that differ: " + ", ".join(f"{k} {a} → {b}" for k, (a, b) in v.versions.items()))
        lines.append("")
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    try:
        config = gate_config(args.batchperf_k, args.batchperf_tolerance)
        a, b = load_results(args.a), load_results(args.b)
    except (BaselineError, ValueError) as exc:
        raise SystemExit(f"batchperf compare: {exc}") from None
    verdicts = compare_files(a, b, config)
    extras = {v.name: extra_rows(a, b, v, config) for v in verdicts} if args.all_metrics else None
    if a.fingerprint is None or b.fingerprint is None:
        print("note: a file has no batchperf fingerprint (machine_info.batchperf): hardware identity not checked")
    render_rich(verdicts, make_console(), extras, title=f"{args.a} → {args.b}")
    if args.markdown is not None:
        text = render_markdown(verdicts, args.a, args.b, extras)
        if args.markdown == "-":
            print(text)
        else:
            with open(args.markdown, "a", encoding="utf-8") as fh:
                fh.write(text + "\n")
    failed = any(v.failed for v in verdicts)
    return 1 if failed and args.fail_on_regression else 0
