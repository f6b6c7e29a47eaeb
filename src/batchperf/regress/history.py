"""Change points per cell and metric over a folder of nightly results (``batchperf history DIR``).

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

import math
from dataclasses import dataclass
from pathlib import Path

from batchperf.measure.catalogue import TRACKED, Direction
from batchperf.regress.verdict import markdown_cell
from batchperf.results.io import ResultsFile, read_results
from batchperf.results.record import ResultsError

# The series: the catalogue's tracked metrics, path -> True when higher is better.
METRICS: dict[str, bool] = {m.path: m.direction is Direction.HIGHER for m in TRACKED}
MIN_SEGMENT = 3  # runs on each side of a change point: one odd night is noise, not a change
DEFAULT_PENALTY = 8.0  # ~1% of flat 20-run series with Gaussian noise get a false change point, none at 40 runs
DEFAULT_MIN_CHANGE = 0.01


@dataclass(frozen=True, slots=True)
class ChangePoint:
    cell: str
    metric: str
    run_index: int  # 0-based index into the ordered history: the first run of the new level
    run: ResultsFile
    before: float  # mean of the segment before
    after: float  # mean of the segment from run_index on
    higher_is_better: bool

    @property
    def change(self) -> float:
        return self.after / self.before - 1 if self.before else math.inf

    @property
    def worse(self) -> bool:
        return (self.change < 0) == self.higher_is_better


def load_history(folder: Path) -> tuple[list[ResultsFile], list[str]]:
    """The results files in ``folder`` in run order, and a note for each file that is not one."""
    if not folder.is_dir():
        raise ResultsError(folder, "no such history folder", "Point at the folder the nightly job appends to")
    runs, notes = [], []
    for path in sorted(folder.glob("*.json")):
        try:
            runs.append(read_results(path))
        except ResultsError as exc:
            notes.append(f"skipped {path.name}: {exc}")
    runs.sort(key=lambda r: (r.datetime, r.commit, r.path.name))
    return runs, notes


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


def change_points(runs: list[ResultsFile], metrics: dict[str, bool] | None = None, penalty: float = DEFAULT_PENALTY,
                  min_change: float = DEFAULT_MIN_CHANGE) -> list[ChangePoint]:
    found = []
    by_id = [r.cells_by_id for r in runs]  # by id, not test name: a cell whose test moved keeps its series
    cell_ids = sorted({cid for cells in by_id for cid in cells})
    for cid in cell_ids:
        for metric, higher in (metrics or METRICS).items():
            points = [(i, v) for i, cells in enumerate(by_id)
                      if cid in cells and (v := cells[cid].value(metric)) is not None]
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
        return (["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
                + ["| " + " | ".join(markdown_cell(x) for x in r) + " |" for r in rows])
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    right = {3, 4, 5}
    return ["  ".join(str(x).rjust(w) if i in right else str(x).ljust(w) for i, (x, w) in enumerate(zip(r, widths))).rstrip()
            for r in (head, *rows)]
