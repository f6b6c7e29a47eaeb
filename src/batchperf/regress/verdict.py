"""The one verdict vocabulary: what the gate, ``compare`` and ``ab`` say about a metric and a cell, and one table.

Every judgement ends in a :class:`Verdict` with the reason in a note: the gate's "too noisy to gate" and
``ab``'s "not enough pairs yet" are both *inconclusive*; a metric the baseline has and the run lost, and a
cell that failed to run, are both *failed*. A :class:`MetricVerdict` is one metric's judgement (the reference
value — a baseline's, or A's median — the measured one, the change and the tolerance it was held to, and for
``ab`` the interval and the pairs behind it); a :class:`CellVerdict` is a cell's, with its metrics. One
table (:func:`rows`, :func:`render_text`, :func:`render_rich`, :func:`render_verdicts_markdown`) prints them all.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from batchperf.measure.catalogue import Direction


class Verdict(str, Enum):
    REGRESSION = "regression"
    IMPROVEMENT = "improvement"
    NO_CHANGE = "no change"
    INCONCLUSIVE = "inconclusive"  # too noisy to gate, or too few pairs for an interval to decide
    NOT_JUDGED = "not judged"  # nothing usable to judge against: a bad baseline value, cells that differ
    NO_BASELINE = "no baseline"
    FAILED = "failed"  # lost: the cell failed to run, or a metric the baseline has is missing from the run

    @property
    def failed(self) -> bool:
        """A cell or metric that fails the gate (and ``compare --fail-on-regression``)."""
        return self in (Verdict.REGRESSION, Verdict.FAILED)

    @property
    def unjudged(self) -> bool:
        """Compared with nothing usable: reported in the summary, failed under --batchperf-require-baseline."""
        return self in (Verdict.NO_BASELINE, Verdict.INCONCLUSIVE, Verdict.NOT_JUDGED)

    @property
    def rank(self) -> int:
        """Best to worst (2 .. 0), for "the verdict never improves as a slowdown grows"."""
        return {Verdict.IMPROVEMENT: 2, Verdict.REGRESSION: 0, Verdict.FAILED: 0}.get(self, 1)

    @property
    def label(self) -> str:
        """What a table prints: capitals for what needs a look."""
        return self.value if self in (Verdict.IMPROVEMENT, Verdict.NO_CHANGE) else self.value.upper()


# stored names of earlier versions (the gate's in results files of schema 2, ab.json of schema 1) -> today's
LEGACY = {"pass": "no change", "too-noisy": "inconclusive", "missing": "failed", "not-judged": "not judged",
          "no-baseline": "no baseline", "not comparable": "not judged"}


def stored(text: object) -> Verdict | None:
    """A verdict as a file stored it, today's name or an earlier version's; None when it names none."""
    try:
        return Verdict(LEGACY.get(text, text)) if isinstance(text, str) else None
    except ValueError:
        return None


ICON = {Verdict.REGRESSION: "❌", Verdict.FAILED: "❌", Verdict.IMPROVEMENT: "⬆️", Verdict.INCONCLUSIVE: "❔",
        Verdict.NOT_JUDGED: "⚠️", Verdict.NO_BASELINE: "❔", Verdict.NO_CHANGE: "✅"}
STYLE = {Verdict.REGRESSION: "bold red", Verdict.FAILED: "bold red", Verdict.IMPROVEMENT: "green",
         Verdict.INCONCLUSIVE: "yellow", Verdict.NOT_JUDGED: "yellow"}
ORDER = (Verdict.REGRESSION, Verdict.FAILED, Verdict.NOT_JUDGED, Verdict.INCONCLUSIVE, Verdict.IMPROVEMENT,
         Verdict.NO_BASELINE, Verdict.NO_CHANGE)  # worst first: how the Markdown lists cells


def combine(verdicts: Iterable[Verdict], empty: Verdict) -> Verdict:
    """A cell's verdict from its metrics': a failure; then one that could not be judged; then an inconclusive
    one; then an improvement; no change needs them all. ``empty`` when there is none."""
    seen = set(verdicts)
    if not seen:
        return empty
    if any(v.failed for v in seen):
        return Verdict.REGRESSION
    for v in (Verdict.NOT_JUDGED, Verdict.INCONCLUSIVE, Verdict.IMPROVEMENT):
        if v in seen:
            return v
    return Verdict.NO_CHANGE


@dataclass(frozen=True, slots=True)
class MetricVerdict:
    metric: str  # the catalogue's path (metrics.output_throughput)
    direction: Direction
    verdict: Verdict
    reference: float | None  # the baseline's value, or A's median
    measured: float | None  # this run's value, or B's median
    change: float  # relative: (measured - reference) / |reference|, or ab's estimate of B/A - 1; NaN: none
    tolerance: float  # relative: the gate's tolerance, or ab's margin; NaN: none
    note: str = ""  # why it was not judged, is inconclusive or failed
    first_measured: float | None = None  # the gate's first run when this one is its re-measurement
    interval: tuple[float, float] | None = None  # ab: the relative interval of B/A - 1
    pairs: int | None = None  # ab: the pairs behind the interval
    deciding: bool = True  # ab: False for a metric reported, not deciding
    absolute: bool = False  # change and tolerance in the metric's unit (points of a ratio), not relative

    @property
    def name(self) -> str:
        """The metric's last key, with its tenant: ``output_throughput``, ``attainment[chat.v2]``. A per-tenant
        metric is ``PATH[TENANT]`` (the gate's ``tenants.attainment[chat.v2]``, ab's ``p99_ttft_ms[chat.v2]``):
        only the catalogue's PATH, which holds no bracket, is split at its dots; the tenant's name is kept whole."""
        path, bracket, tenant = self.metric.partition("[")
        return path.rsplit(".", 1)[-1] + bracket + tenant


@dataclass(frozen=True, slots=True)
class CellVerdict:
    name: str
    verdict: Verdict
    metrics: tuple[MetricVerdict, ...] = ()
    notes: tuple[str, ...] = ()  # why: no comparable baseline (the identity differences), a failure to run
    versions: Mapping[str, tuple[str, str]] = field(default_factory=dict)  # upgrade axes that differ
    warnings: tuple[str, ...] = ()
    remeasured: bool = False  # the gate: confirmed by (or forgiven after) a re-measurement
    settled_at: int | None = None  # ab: the pairs behind a settled verdict
    void: bool = False  # the gate: a GPU that did not hold its clocks (batchperf.telemetry.gpu_clocks): not judged

    @property
    def failed(self) -> bool:
        return self.verdict.failed

    @property
    def status(self) -> str:
        after = (" (confirmed by a re-measurement)" if self.remeasured and self.failed else
                 f" (after {self.settled_at} pair(s))" if self.settled_at else "")
        return self.verdict.label + after

    @property
    def title(self) -> str:
        return f"{self.name}: {self.status}"


# --- the one table ----------------------------------------------------------------------------------------------


def fmt_value(value: float | None) -> str:
    if value is None or math.isnan(value):
        return "-"
    if abs(value) >= 1e5:
        return f"{value:,.0f}"
    return f"{value:.4g}"


def fmt_change(change: float) -> str:
    if math.isnan(change):
        return "-"
    if math.isinf(change):
        return "+inf" if change > 0 else "-inf"
    return f"{change * 100:+.1f}%"


def fmt_points(change: float) -> str:
    """An absolute change of a ratio, in percentage points (SLO attainment)."""
    return "-" if math.isnan(change) else f"{change * 100:+.1f} pp"


def fmt_delta(m: MetricVerdict) -> str:
    """A metric's change as its rule measures it: relative (%), or in points for an absolute rule."""
    return fmt_points(m.change) if m.absolute else fmt_change(m.change)


def fmt_tolerance(m: MetricVerdict) -> str:
    if m.direction is Direction.EXACT:
        return "exact"
    if math.isnan(m.tolerance):
        return "-"
    return f"{'-' if m.direction is Direction.HIGHER else '+'}{m.tolerance * 100:.1f}{' pp' if m.absolute else '%'}"


GATE_HEADER = ("metric", "baseline", "measured", "change", "tolerance", "verdict")
AB_HEADER = ("metric", "A median", "B median", "B/A estimate", "interval", "margin", "pairs", "verdict")


def row(m: MetricVerdict, ab: bool = False) -> tuple[str, ...]:
    """One metric's row; ``ab`` adds the interval and the pairs (and marks a reported, not deciding, metric)."""
    measured = fmt_value(m.measured)
    if m.first_measured is not None:
        measured += f" (1st {fmt_value(m.first_measured)})"
    label = m.verdict.label if m.deciding else f"({m.verdict.value}; reported)"
    if not ab:
        return (m.name, fmt_value(m.reference), measured, fmt_delta(m), fmt_tolerance(m), label)
    exact = m.direction is Direction.EXACT
    interval = ("exact" if exact else "-" if m.interval is None
                else f"[{fmt_change(m.interval[0])}, {fmt_change(m.interval[1])}]")
    margin = "exact" if exact else f"±{m.tolerance:.0%}"  # ab's margin: a band around no change
    return (m.name, fmt_value(m.reference), measured, fmt_change(m.change), interval, margin, str(m.pairs or 0), label)


def rows(cell: CellVerdict, ab: bool = False) -> list[tuple[str, ...]]:
    return [row(m, ab) for m in cell.metrics]


def notes(cell: CellVerdict) -> list[str]:
    """The lines under a cell's table: why, each metric's note, the versions that differ, warnings."""
    out = list(cell.notes)
    out += [f"{m.name}: {m.note}" for m in cell.metrics if m.note]
    if cell.versions:
        out.append("versions that differ from the baseline: "
                   + ", ".join(f"{k} {a} → {b}" for k, (a, b) in cell.versions.items()))
    out += [f"note: {w}" for w in cell.warnings]
    return out


def _style(label: str) -> str:
    for v, style in STYLE.items():
        if label == v.label:
            return style
    return ""


def header(ab: bool = False) -> tuple[str, ...]:
    return AB_HEADER if ab else GATE_HEADER


def render_text(cell: CellVerdict, ab: bool = False) -> str:
    """A cell as plain aligned text (a failed test's message)."""
    table = [header(ab), *rows(cell, ab)]
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    lines = [f"batchperf: {cell.title}"]
    for i, r in enumerate(table):
        lines.append("  ".join(c.ljust(w) if j == 0 else c.rjust(w) for j, (c, w) in enumerate(zip(r, widths))))
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines + notes(cell))


def render_rich(cells: Sequence[CellVerdict], console: Any, ab: bool = False,
                extras: Mapping[str, Sequence[tuple[str, ...]]] | None = None) -> None:
    """Each cell as a rich table (a cell without metrics as its title and notes)."""
    from rich.markup import escape
    from rich.table import Table

    # every text is escaped: rich reads "[...]" as markup, and a per-tenant metric is named attainment[chat]
    for cell in cells:
        if not cell.metrics:
            console.print(f"[bold]{escape(cell.title)}[/bold]", highlight=False)
        else:
            table = Table(title=escape(cell.title), title_justify="left", show_edge=False, pad_edge=False)
            for i, col in enumerate(header(ab)):
                table.add_column(col, justify="left" if i == 0 else "right")
            for r in [*rows(cell, ab), *(extras or {}).get(cell.name, [])]:
                table.add_row(*(escape(text) for text in r), style=_style(r[-1]))
            console.print(table)
        for line in notes(cell):
            console.print(f"  {escape(line)}", highlight=False)


def markdown_cell(text: str) -> str:
    """A user's text (a cell id, a tenant's name in a metric, a label, a reason) inside a Markdown table row: a '|'
    would end its column and a line break its row. Every Markdown table of batchperf writes its texts through this."""
    return " ".join(text.split()).replace("|", "\\|")


def render_verdicts_markdown(cells: Sequence[CellVerdict], ab: bool = False,
                             extras: Mapping[str, Sequence[tuple[str, ...]]] | None = None,
                             sort: bool = False) -> list[str]:
    """Each cell as a Markdown section with its table (worst first when ``sort``)."""
    lines: list[str] = []
    ordered = sorted(cells, key=lambda c: (ORDER.index(c.verdict), c.name)) if sort else cells
    for cell in ordered:
        lines += [f"### {ICON[cell.verdict]} `{cell.name}`: {cell.status}", ""]
        if cell.metrics:
            lines.append("| " + " | ".join(header(ab)) + " |")
            lines.append("|---|" + "---:|" * (len(header(ab)) - 1))
            for r in [*rows(cell, ab), *(extras or {}).get(cell.name, [])]:
                bold = r[-1] in (Verdict.REGRESSION.label, Verdict.FAILED.label)
                texts = [markdown_cell(c) for c in r]
                lines.append("| " + " | ".join(f"**{c}**" if bold and c else c for c in texts) + " |")
            lines.append("")
        lines += [f"- {line}" for line in notes(cell)]
        lines.append("")
    return lines


def counts(cells: Iterable[CellVerdict]) -> dict[Verdict, int]:
    out: dict[Verdict, int] = {}
    for cell in cells:
        out[cell.verdict] = out.get(cell.verdict, 0) + 1
    return out


def count_line(cells: Iterable[CellVerdict]) -> str:
    return ", ".join(f"{n} {v.value}" for v, n in counts(cells).items())
