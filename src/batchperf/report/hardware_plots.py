"""The report's hardware-scaling figure: two machines, each cell's measured speed-up beside the predicted one.

Drawn when the report is given results files of two or more machines (their hardware keys differ): the first
file is the old machine, each later file of another machine a new one (:mod:`batchperf.regress.hardware` judges
each cell). One horizontal bar per cell, the measured NEW / OLD throughput, coloured by the verdict; a black
mark at the prediction for the cell's bound, with its tolerance as a whisker.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from batchperf.regress.hardware import BEAT, LOST, SCALED, Scaling, compare_hardware
from batchperf.regress.store import fingerprint_of
from batchperf.report.plots import PANEL_W, _pyplot, _save
from batchperf.results.io import ResultsFile

COLORS = {SCALED: "#1b7f2a", LOST: "#b00020", BEAT: "#1f77b4"}
OTHER = "#999999"  # no prediction, not comparable


def machine_pairs(files: list[ResultsFile]) -> list[tuple[ResultsFile, ResultsFile]]:
    """(old, new) for each file of another machine than the first file's; none without fingerprints."""
    if len(files) < 2 or (first := fingerprint_of(files[0])) is None:
        return []
    return [(files[0], f) for f in files[1:] if (fp := fingerprint_of(f)) is not None and fp.key != first.key]


def scaling_figure(files: list[ResultsFile], path: Path) -> Path | None:
    """The figure at ``path``; None when the files are of one machine (nothing to scale)."""
    pairs = [(old, new, compare_hardware(old, new)) for old, new in machine_pairs(files)]
    pairs = [p for p in pairs if p[2]]
    if not pairs:
        return None
    plt = _pyplot()
    tallest = max(len(rows) for _, _, rows in pairs)
    fig, axes = plt.subplots(1, len(pairs), figsize=(PANEL_W * 2 * len(pairs), 0.35 * tallest + 1.6), squeeze=False)
    for ax, (old, new, rows) in zip(axes[0], pairs):
        _panel(ax, rows)
        # the headline in each panel's own title: a figure title collides with it on a tall figure (tight_layout)
        ax.set_title(f"Hardware upgrade: measured speed-up vs the prediction for each cell's bound\n"
                     f"{old.name} → {new.name}", fontsize=10)
    return _save(fig, plt, path)


def _panel(ax: Any, rows: list[Scaling]) -> None:
    ys = range(len(rows))
    ax.barh(ys, [r.measured or 0.0 for r in rows], color=[COLORS.get(r.verdict, OTHER) for r in rows], alpha=0.8)
    marked = [(y, r) for y, r in zip(ys, rows) if r.predicted is not None]
    ax.errorbar([r.predicted for _, r in marked], [y for y, _ in marked],
                xerr=[[r.predicted * r.tolerance for _, r in marked]] * 2, fmt="|", color="black", markersize=14,
                capsize=3, label="predicted (± tolerance)")
    ax.axvline(1.0, color="#555", linestyle=":", linewidth=1)
    ax.set_yticks(list(ys), [f"{r.cell} [{r.bound.value}]" for r in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set(xlabel="NEW / OLD output throughput (bars: measured)")
    ax.grid(True, axis="x", alpha=0.3)
    ax.legend(loc="lower right", fontsize=7)
