"""The detector study's verdicts read back: one :class:`Score` per ``ab.json``, the finished ones of a study folder,
and the verdict table (rates, pairs, minutes and interval widths per cell kind and slowdown)."""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from batchperf.calibrate.cells import DETECTOR_CELLS, VERDICTS

AA_TARGET = 1  # of VERDICTS: A/A verdicts allowed to say regression
MINUTES_TARGET = 10.0  # each verdict within this many minutes
Key = tuple[str, float]  # (cell kind, slowdown of B; 0 for A/A)


@dataclass(frozen=True, slots=True)
class Score:
    verdict: str
    pairs: int
    minutes: float
    width: float | None  # the deciding metric's final interval width (B/A - 1), None when unbounded
    estimate: float | None


def score(doc: dict[str, Any], metric: str) -> Score:
    """A verdict's score from its ``ab.json`` (what ``AbResult.to_dict`` writes): one cell, one deciding metric."""
    (cell,) = doc["cells"]
    m = next((x for x in cell["metrics"] if x["metric"] == metric), {})
    low, high, estimate = m.get("low"), m.get("high"), m.get("estimate")
    width = high - low if low is not None and high is not None and math.isfinite(high - low) else None
    return Score(cell["verdict"], len(doc["pairs"]), doc["elapsed_s"] / 60, width, estimate)


def finished(folder: Path) -> dict[str, Any] | None:
    """A kept verdict's ``ab.json`` when it ran to its end (done or budget), so a rerun resumes after it."""
    try:
        doc = json.loads((folder / "ab.json").read_text())
    except (OSError, ValueError):
        return None
    return doc if doc.get("status") in ("done", "budget") else None


def measured(work: Path) -> dict[Key, list[dict[str, Any]]]:
    """(kind, slowdown) -> the ``ab.json`` of every finished verdict folder ``KIND-SLOWDOWN-NN`` under ``work``."""
    found: dict[Key, list[dict[str, Any]]] = {}
    for folder in sorted(work.iterdir()):
        kind, _, rest = folder.name.partition("-")
        slowdown, _, index = rest.partition("-")
        if kind in DETECTOR_CELLS and index.isdigit() and (doc := finished(folder)) is not None:
            doc["folder"] = str(folder)  # where its pairs' results files are, wherever the study was moved
            found.setdefault((kind, float(slowdown)), []).append(doc)
    return found


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def row_head(kind: str, slowdown: float) -> str:
    """The first two cells of a table row: the cell kind and how much B was slowed."""
    return f"| {DETECTOR_CELLS[kind].name} | {slowdown:.0%}{' (A/A)' if not slowdown else ''} |"


def target_of(kind: str, slowdown: float) -> str:
    wanted = (f"regression <= {AA_TARGET}/{VERDICTS}" if not slowdown
              else f"regression >= {DETECTOR_CELLS[kind].target}/{VERDICTS}")
    return f"{wanted}, each <= {MINUTES_TARGET:g} min"


def table(rows: dict[Key, list[Score]]) -> str:
    """The verdict table: one row per (kind, slowdown), its verdicts counted and their medians."""
    lines = [("| cell | B slowed by | verdicts | regression | no change | inconclusive | other | median pairs "
              "| median minutes (max) | median interval width | median estimate | target |"),
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for (kind, slowdown), scores in rows.items():
        n = len(scores)
        count = {v: sum(s.verdict == v for s in scores) for v in ("regression", "no change", "inconclusive")}
        other = n - sum(count.values())
        minutes = [s.minutes for s in scores]
        lines.append(
            f"{row_head(kind, slowdown)} {n} | {count['regression']} "
            f"({count['regression'] / n:.0%}) | {count['no change']} | {count['inconclusive']} | {other} "
            f"| {fmt(median([s.pairs for s in scores]), '.0f')} | {fmt(median(minutes), '.1f')} ({max(minutes):.1f}) "
            f"| {fmt(median([s.width for s in scores if s.width is not None]), '.1%')} "
            f"| {fmt(median([s.estimate for s in scores if s.estimate is not None]), '+.1%')} "
            f"| {target_of(kind, slowdown)} |")
    return "\n".join(lines)
