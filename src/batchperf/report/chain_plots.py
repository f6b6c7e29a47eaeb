"""The release-over-release picture of a chain (``batchperf chain``), one PNG per cell, and its HTML page.

Left, each step: B/A − 1 of the cell's headline metric (throughput by default) with its interval, coloured by the
step's verdict, the ±margin band shaded. Right, the level of each release against the first: the running product
of the step ratios, and at the last release the measured first → last with its interval beside it (asv's history
and Pinpoint's per-step answer in one figure). Labels are users' strings: drawn as plain text (``_pyplot``).

What a cell's picture needs is the :class:`ChainLevel` protocol; ``batchperf.releases.chain_report.Level`` is one (the
report stage reads a chain's numbers, never the ab stage that measured them).
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from batchperf.report.plots import _pyplot, _save
from batchperf.results.io import atomic_write_text, file_part

COLORS = {"regression": "tab:red", "improvement": "tab:green", "no change": "tab:blue", "inconclusive": "tab:orange"}
OTHER = "tab:gray"  # failed, not judged, not run


class ChainLevel(Protocol):
    cell: str
    metric: str
    labels: tuple[str, ...]
    steps: tuple[tuple[float, float, float] | None, ...]  # per adjacent step: (estimate, low, high) of B/A − 1
    verdicts: tuple[str, ...]
    cumulative: tuple[float | None, ...]  # per release: level against the first, −1
    first_last: tuple[float, float, float] | None
    first_last_verdict: str
    margin: float | None
    confirmed: tuple[bool | None, ...]  # per adjacent step: its call confirmed, not confirmed, None (no call)
    first_last_confirmed: bool | None


def marked(verdict: str, confirmed: bool | None) -> tuple[str, str]:
    """(the words beside a point, its face colour): a call not confirmed by its second run is drawn hollow."""
    if confirmed is False:
        return f"{verdict} (not confirmed)", "white"
    return (f"{verdict} (confirmed)" if confirmed else verdict), ""


def file_name(cell: str) -> str:
    """The cell's PNG: one name per cell id (``a/b`` and ``a:b`` apart), under the 255 bytes a name may hold."""
    return f"chain-{file_part(cell, distinct=True)}.png"


def release_plot(level: ChainLevel, path: Path) -> Path:
    plt = _pyplot()
    n = len(level.labels)
    fig, (left, right) = plt.subplots(1, 2, figsize=(max(9.5, 1.9 * n * 2), 4.2))
    fig.suptitle(f"{level.cell}: {level.metric}, release over release", fontsize=12)
    steps = [f"{a} →\n{b}" for a, b in zip(level.labels, level.labels[1:])]
    confirmed = level.confirmed or (None,) * len(level.steps)
    for i, (iv, verdict, state) in enumerate(zip(level.steps, level.verdicts, confirmed)):
        color = COLORS.get(verdict, OTHER)
        if iv is None:
            left.annotate(verdict.upper(), (i, 0), ha="center", va="bottom", fontsize=8, color=color)
            continue
        est, low, high = (100 * x for x in iv)
        words, face = marked(verdict, state)
        left.errorbar([i], [est], yerr=[[est - low], [high - est]], fmt="o", color=color, capsize=5, markersize=7,
                      markerfacecolor=face or color, markeredgewidth=1.5)
        left.annotate(words, (i, high), textcoords="offset points", xytext=(0, 5), ha="center", fontsize=8,
                      color=color)
    band = ""
    if level.margin:
        left.axhspan(-100 * level.margin, 100 * level.margin, color="tab:blue", alpha=0.08)
        band = f" (shaded: ±{level.margin:.0%}, no change)"
    left.axhline(0, color="black", linewidth=0.8)
    low_y, high_y = left.get_ylim()  # head room for the verdict written above the tallest interval
    left.set_ylim(low_y, high_y + 0.12 * (high_y - low_y))
    left.set_xticks(range(len(steps)), steps, fontsize=8)
    left.set_xlim(-0.6, len(steps) - 0.4)
    left.set_ylabel("B/A − 1 (%), interval")
    left.set_title("each step" + band)
    left.grid(True, axis="y", alpha=0.3)

    xs = [i for i, v in enumerate(level.cumulative) if v is not None]
    right.plot(xs, [100 * level.cumulative[i] for i in xs], marker="o", color="tab:blue",  # type: ignore[operator]
               label="product of the steps")
    if level.first_last is not None:
        est, low, high = (100 * x for x in level.first_last)
        color = COLORS.get(level.first_last_verdict, OTHER)
        words, face = marked(level.first_last_verdict, level.first_last_confirmed)
        right.errorbar([n - 1 + 0.15], [est], yerr=[[est - low], [high - est]], fmt="s", color=color, capsize=5,
                       markerfacecolor=face or color, markeredgewidth=1.5, label=f"measured first → last ({words})")
    right.axhline(0, color="black", linewidth=0.8)
    right.set_xticks(range(n), list(level.labels), fontsize=8)
    right.set_xlim(-0.4, n - 0.4)
    right.set_ylabel(f"level against {level.labels[0]} (%)")
    right.set_title("cumulative level")
    right.grid(True, axis="y", alpha=0.3)
    # below the axes: a level can run up or down from the first release, so no corner inside is always free
    right.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2)
    return _save(fig, plt, path)


CAPTION = ("Left: each step's B/A − 1 of the headline metric (throughput unless other metrics decide), the point "
           "the estimate, the bar its interval, coloured by the step's verdict, hollow where a call was not confirmed "
           "by its second run (B first); the shaded band is the no-change margin. Right: each release's level against "
           "the first, the product of the step ratios (no point past a step without an estimate), and the measured "
           "first → last with its interval beside the last release. "
           "The product carries each step's noise; the measured first → last is the one to trust for the total.")


def write_chain_page(out: Path, figures: Sequence[tuple[str, Path]], table_markdown: str, name: str) -> Path:
    """``out/name``: the figures and the chain's table (as preformatted text, escaped)."""
    parts = ["<!doctype html><html><head><meta charset='utf-8'><title>batchperf chain</title>",
             "<style>body{font-family:sans-serif;margin:2em;max-width:1200px}img{max-width:100%}"
             ".caption{color:#444}</style></head><body><h1>batchperf chain</h1>",
             f"<p class='caption'>{html.escape(CAPTION)}</p>"]
    for cell, path in figures:
        parts.append(f"<h2>{html.escape(cell)}</h2><img src='{html.escape(path.name)}' alt='{html.escape(cell)}'>")
    parts.append(f"<pre>{html.escape(table_markdown)}</pre></body></html>")
    index = out / name
    atomic_write_text(index, "\n".join(parts) + "\n")
    return index
