"""What ``batchperf ab`` prints: a terminal table per cell, the same as Markdown for a CI job summary.

One row builder (:func:`metric_rows`) serves both, so the terminal and the summary never disagree.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from batchperf.ab import stats as ab_stats
from batchperf.ab.run import AbResult, CellState, CellVerdict, MetricResult
from batchperf.ab.stats import Call
from batchperf.regress.gate import Direction, fmt_value

HEADER = ("metric", "A median", "B median", "B/A estimate", "interval", "margin", "pairs", "verdict")
EXIT_MEANING = {0: "no regression", 1: "regression", 2: "inconclusive at the budget",
                4: "a cell or an environment failed to run", 130: "interrupted"}
LABEL = {CellVerdict.REGRESSION: "REGRESSION", CellVerdict.FAILED: "FAILED", CellVerdict.NOT_COMPARABLE: "NOT COMPARABLE"}


def _pct(x: float) -> str:
    if math.isinf(x):
        return "+inf" if x > 0 else "-inf"
    return f"{x * 100:+.1f}%"


def metric_row(m: MetricResult) -> tuple[str, ...]:
    a = fmt_value(statistics.median(m.a)) if m.a else "-"
    b = fmt_value(statistics.median(m.b)) if m.b else "-"
    if m.direction is Direction.EXACT:
        estimate, interval, margin = "-", "exact", "exact"
    elif m.interval is None:
        estimate, interval, margin = "-", "-", f"±{m.margin:.0%}"
    else:
        iv = m.interval
        estimate = _pct(ab_stats.relative(iv.estimate))
        interval = f"[{_pct(ab_stats.relative(iv.low))}, {_pct(ab_stats.relative(iv.high))}]"
        margin = f"±{m.margin:.0%}"
    verdict = m.call.value.upper() if m.call is Call.REGRESSION and m.deciding else m.call.value
    if not m.deciding:
        verdict = f"({verdict}; reported)"
    return (m.metric, a, b, estimate, interval, margin, str(len(m.a)), verdict)


def metric_rows(cell: CellState) -> list[tuple[str, ...]]:
    ordered = sorted(cell.metrics.values(), key=lambda m: (not m.deciding, m.direction is Direction.EXACT))
    return [metric_row(m) for m in ordered]


def cell_title(cell: CellState) -> str:
    label = LABEL.get(cell.verdict, cell.verdict.value)
    after = f" (after {cell.settled_at} pair(s))" if cell.settled_at else ""
    return f"{cell.id}: {label}{after}"


def cell_notes(cell: CellState) -> list[str]:
    notes = [cell.note] if cell.note else []
    notes += [f"in {label}: {why}" for label, why in sorted(cell.failures.items())]
    return notes


def headline(result: AbResult) -> list[str]:
    s = result.settings
    loads = result.loads
    lines = [f"A = {s.a.describe()}", f"B = {s.b.describe()}",
             f"{len(result.pairs)} pair(s) of fresh processes (A B, B A, …) in {result.elapsed_s / 60:.1f} min; "
             f"{s.rounds or 'the tier’s'} round(s) per process; status: {result.status}"
             + (f" ({result.reason})" if result.reason else "")]
    if loads:
        lines.append(f"machine load (1-min average, at each pair): min {min(loads):.2f}, median "
                     f"{statistics.median(loads):.2f}, max {max(loads):.2f}")
    lines.append(f"intervals: Wilcoxon signed-rank on ln(B/A) per pair, Hodges-Lehmann estimate, per-look level "
                 f"{result.level:.3g} ({result.level_method})")
    if result.versions_differ:
        lines.append("versions that differ: " + ", ".join(f"{k} {a} → {b}" for k, (a, b) in result.versions_differ.items()))
    else:
        lines.append("versions that differ: none (same upgrade axes in A and B)")
    if result.vars_differ:
        lines.append("environment variables that differ: "
                     + ", ".join(f"{k} {a} → {b}" for k, (a, b) in result.vars_differ.items()))
    for label, ids in result.only_in.items():
        lines.append(f"only in {label} (not compared): {', '.join(ids)}")
    return lines


def summary(result: AbResult) -> str:
    counts: dict[str, int] = {}
    for cell in result.cells.values():
        counts[cell.verdict.value] = counts.get(cell.verdict.value, 0) + 1
    code = result.exit_code
    return (", ".join(f"{n} {k}" for k, n in counts.items()) + f" → exit {code} ({EXIT_MEANING.get(code, '')})")


def render_rich(result: AbResult, console: Any) -> None:
    from rich.table import Table

    for line in headline(result):
        console.print(line, highlight=False)
    for cell in result.cells.values():
        if not cell.metrics:
            console.print(f"[bold]{cell_title(cell)}[/bold]")
        else:
            table = Table(title=cell_title(cell), title_justify="left", show_edge=False, pad_edge=False)
            for i, col in enumerate(HEADER):
                table.add_column(col, justify="left" if i == 0 else "right")
            for row in metric_rows(cell):
                table.add_row(*row, style="bold red" if row[-1] == "REGRESSION" else "")
            console.print(table)
        for note in cell_notes(cell):
            console.print(f"  {note}", highlight=False)
    console.print(f"batchperf ab: {summary(result)}", highlight=False)


def render_markdown(result: AbResult) -> str:
    icon = {CellVerdict.REGRESSION: "❌", CellVerdict.FAILED: "⚠️", CellVerdict.NOT_COMPARABLE: "⚠️",
            CellVerdict.INCONCLUSIVE: "❔", CellVerdict.IMPROVEMENT: "⬆️", CellVerdict.NO_CHANGE: "✅"}
    lines = ["## batchperf ab", "", f"**{summary(result)}**", ""]
    lines += [f"- {line}" for line in headline(result)] + [""]
    for cell in result.cells.values():
        lines += [f"### {icon[cell.verdict]} `{cell_title(cell)}`", ""]
        if cell.metrics:
            lines.append("| " + " | ".join(HEADER) + " |")
            lines.append("|---|" + "---:|" * (len(HEADER) - 1))
            for row in metric_rows(cell):
                cells = [f"**{c}**" if row[-1] == "REGRESSION" and c else c for c in row]
                lines.append("| " + " | ".join(cells) + " |")
            lines.append("")
        lines += [f"- {note}" for note in cell_notes(cell)]
        lines.append("")
    return "\n".join(lines)
