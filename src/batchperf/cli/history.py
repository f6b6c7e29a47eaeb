"""``batchperf history DIR``: change points per cell and metric over a folder of nightly results."""

from __future__ import annotations

import argparse
from pathlib import Path

from batchperf.cli.options import real
from batchperf.regress.history import (
    DEFAULT_MIN_CHANGE,
    DEFAULT_PENALTY,
    METRICS,
    MIN_SEGMENT,
    change_points,
    load_history,
    table,
)
from batchperf.results.record import ResultsError


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("folder", type=Path, help="folder of results JSON files, one per nightly run")
    parser.add_argument("--penalty", type=real(above=True), default=DEFAULT_PENALTY,
                        help=f"PELT penalty in units of σ²·ln(n); higher finds fewer changes (default {DEFAULT_PENALTY})")
    parser.add_argument("--min-change", type=real(), default=DEFAULT_MIN_CHANGE,
                        help=f"ignore change points smaller than this fraction (default {DEFAULT_MIN_CHANGE})")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table (for a CI job summary)")


def main(args: argparse.Namespace) -> int:
    try:
        runs, notes = load_history(args.folder)
    except ResultsError as exc:
        raise SystemExit(f"batchperf history: {exc}") from None
    for note in notes:
        print(f"note: {note}")
    if len(runs) < 2 * MIN_SEGMENT:
        print(f"batchperf history: {len(runs)} run(s) in {args.folder}; change points need at least "
              f"{2 * MIN_SEGMENT} runs ({MIN_SEGMENT} on each side)")
        return 0
    points = change_points(runs, penalty=args.penalty, min_change=args.min_change)
    cells = len({c for r in runs for c in r.cells_by_id})
    print(f"batchperf history: {len(runs)} runs ({runs[0].label} … {runs[-1].label}), {cells} cells, "
          f"{len(METRICS)} metrics: {len(points)} change point(s), {sum(p.worse for p in points)} worse")
    if points:
        print("\n".join(table(points, markdown=args.markdown)))
    return 0
