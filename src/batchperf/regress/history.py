"""``batchperf history DIR``: change points per cell and metric over a folder of nightly results.

The nightly gate compares one run with its baseline, so a slow drift — say
+1.5% P99 latency a night, always inside the per-run tolerance — never fails
it. Here every cell's metric is a series over the runs in the folder (ordered
by the results' ``datetime``, then commit), and change points are found with
``ruptures``' PELT search on the series normalised to its median, with a
penalty of ``penalty × σ² × ln(n)`` where σ is the run-to-run noise estimated
robustly from the first differences (MAD). A drift shows up as one or more
steps; each is listed with the run where it starts and its size (mean after /
mean before − 1).
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from batchperf.results.record import CellResult, ResultsError, load_results

# Metric (dotted path into a cell's extra_info) -> True when higher is better.
METRICS: dict[str, bool] = {
    "metrics.output_throughput": True,
    "metrics.request_throughput": True,
    "metrics.mean_ttft_ms": False,
    "metrics.p99_ttft_ms": False,
    "metrics.p99_tpot_ms": False,
    "metrics.p99_itl_ms": False,
    "metrics.p99_e2el_ms": False,
    "kv.kv_bytes_per_request_mean": False,
}
MIN_SEGMENT = 3  # runs on each side of a change point: one odd night is noise, not a change
DEFAULT_PENALTY = 8.0  # ~1% of flat 20-run series with Gaussian noise get a false change point, none at 40 runs
DEFAULT_MIN_CHANGE = 0.01


@dataclass(frozen=True, slots=True)
class Run:
    path: Path
    datetime: str
    commit: str
    cells: dict[str, CellResult]

    @property
    def label(self) -> str:
        return f"{self.datetime[:16].replace('T', ' ')} {self.commit[:8]}".strip()


@dataclass(frozen=True, slots=True)
class ChangePoint:
    cell: str
    metric: str
    run_index: int  # 0-based index into the ordered history: the first run of the new level
    run: Run
    before: float  # mean of the segment before
    after: float  # mean of the segment from run_index on
    higher_is_better: bool

    @property
    def change(self) -> float:
        return self.after / self.before - 1 if self.before else math.inf

    @property
    def worse(self) -> bool:
        return (self.change < 0) == self.higher_is_better


def load_history(folder: Path) -> tuple[list[Run], list[str]]:
    """The results files in ``folder`` in run order, and a note for each file that is not one."""
    if not folder.is_dir():
        raise ResultsError(f"{folder}: no such history folder; point at the folder the nightly job appends to")
    runs, notes = [], []
    for path in sorted(folder.glob("*.json")):
        try:
            header = json.loads(path.read_text())
            cells = {c.id: c for c in load_results(path)}
        except (ResultsError, json.JSONDecodeError, UnicodeDecodeError) as exc:
            notes.append(f"skipped {path.name}: {exc}")
            continue
        commit = str((header.get("commit_info") or {}).get("id") or "")
        runs.append(Run(path, str(header.get("datetime") or ""), commit, cells))
    runs.sort(key=lambda r: (r.datetime, r.commit, r.path.name))
    return runs, notes


def value(cell: CellResult, metric: str) -> float | None:
    node: Any = cell.info
    for part in metric.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return float(node) if isinstance(node, int | float) and math.isfinite(node) else None


def breakpoints(series: list[float], penalty: float = DEFAULT_PENALTY) -> list[int]:
    """Indices where a new level starts (PELT, L2 cost, on the series relative to its median)."""
    import numpy as np

    try:
        import ruptures
    except ImportError:
        raise SystemExit("batchperf history needs the ruptures package: pip install 'batchperf[history]'") from None

    x = np.asarray(series, dtype=float)
    if len(x) < 2 * MIN_SEGMENT:
        return []
    y = x / np.median(x) if np.median(x) else x
    diffs = np.diff(y)
    # MAD of first differences: a level shift or a drift moves few of them, so σ stays the noise's.
    sigma = 1.4826 * float(np.median(np.abs(diffs - np.median(diffs)))) / math.sqrt(2)
    sigma = max(sigma, 1e-4)  # a perfectly flat series still needs a finite penalty
    algo = ruptures.Pelt(model="l2", min_size=MIN_SEGMENT, jump=1).fit(y.reshape(-1, 1))
    return [int(b) for b in algo.predict(pen=penalty * sigma**2 * math.log(len(x)))[:-1]]


def change_points(runs: list[Run], metrics: dict[str, bool] | None = None, penalty: float = DEFAULT_PENALTY,
                  min_change: float = DEFAULT_MIN_CHANGE) -> list[ChangePoint]:
    found = []
    cell_ids = sorted({cid for r in runs for cid in r.cells})
    for cid in cell_ids:
        for metric, higher in (metrics or METRICS).items():
            points = [(i, v) for i, r in enumerate(runs) if cid in r.cells and (v := value(r.cells[cid], metric)) is not None]
            series = [v for _, v in points]
            bounds = [0, *breakpoints(series, penalty), len(series)]
            for k in range(1, len(bounds) - 1):
                before = series[bounds[k - 1]:bounds[k]]
                after = series[bounds[k]:bounds[k + 1]]
                run_index = points[bounds[k]][0]
                cp = ChangePoint(cid, metric, run_index, runs[run_index], sum(before) / len(before),
                                 sum(after) / len(after), higher)
                if abs(cp.change) >= min_change:
                    found.append(cp)
    return found


def table(points: list[ChangePoint], markdown: bool = False) -> list[str]:
    head = ("cell", "metric", "from run", "before", "after", "change", "")
    rows = [(p.cell, p.metric.split(".", 1)[1], f"#{p.run_index + 1} {p.run.label}", f"{p.before:,.2f}",
             f"{p.after:,.2f}", f"{p.change:+.1%}", "worse" if p.worse else "better") for p in points]
    if markdown:
        return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    right = {3, 4, 5}
    return ["  ".join(str(x).rjust(w) if i in right else str(x).ljust(w) for i, (x, w) in enumerate(zip(r, widths))).rstrip()
            for r in (head, *rows)]


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("folder", type=Path, help="folder of results JSON files, one per nightly run")
    parser.add_argument("--penalty", type=float, default=DEFAULT_PENALTY,
                        help=f"PELT penalty in units of σ²·ln(n); higher finds fewer changes (default {DEFAULT_PENALTY})")
    parser.add_argument("--min-change", type=float, default=DEFAULT_MIN_CHANGE,
                        help=f"ignore change points smaller than this fraction (default {DEFAULT_MIN_CHANGE})")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table (for a CI job summary)")


def main(args: argparse.Namespace) -> int:
    if args.penalty <= 0 or args.min_change < 0:
        raise SystemExit("batchperf history: --penalty must be > 0 and --min-change >= 0")
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
    cells = len({c for r in runs for c in r.cells})
    print(f"batchperf history: {len(runs)} runs ({runs[0].label} … {runs[-1].label}), {cells} cells, "
          f"{len(METRICS)} metrics: {len(points)} change point(s), {sum(p.worse for p in points)} worse")
    if points:
        print("\n".join(table(points, markdown=args.markdown)))
    return 0
