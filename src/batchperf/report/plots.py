"""The report's figures: one function per PNG, each from cell records to a file (matplotlib, Agg).

A *series* is one line: the cells of one results file × model × backend ×
concurrency (× batch size, for plots over concurrency), labelled by the parts
that vary in what is plotted. Panels split by prompt length.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from batchperf.measure.kv_growth import KVGrowth
from batchperf.measure.metrics import itl_samples
from batchperf.report import counter_plots
from batchperf.report.identity import identity
from batchperf.report.knee import KNEE_FRACTION, knee
from batchperf.results.io import atomic_write_bytes
from batchperf.results.record import CellRecord

MIB = 2**20
PANEL_W, PANEL_H = 4.6, 3.4
# Every curve here rises from the left, so the upper left is free. A fixed place, not matplotlib's "best":
# "best" times its own search and warns when it is slow, which a loaded machine turns into a flaky report.
LEGEND_LOC = "upper left"


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # files only; never a window, never a display
    # Tenant names, file names and cell ids are drawn as they are: a tenant called "$\foo$" is a name, not math
    # text (which failed the whole page).
    matplotlib.rcParams["text.parse_math"] = False
    import matplotlib.pyplot as plt

    return plt


def legend_label(text: str) -> str:
    """``text`` as a legend shows it: matplotlib leaves out of a legend every label that starts with "_", so a
    tenant called "_batch" gets a zero-width space in front (drawn as nothing) and is listed like any other."""
    return "\u200b" + text if text.startswith("_") else text


def _prompt_order(cells: Iterable[CellRecord]) -> list[str]:
    """Prompt-length labels, shortest first."""
    tokens = {c.prompt_label: c.prompt_tokens for c in cells}
    return sorted(tokens, key=lambda label: (tokens[label], label))


def batch_study(cells: Iterable[CellRecord]) -> list[CellRecord]:
    """The cells of the batch-size study: synthetic workloads under the default policy. Traffic cells (a trace,
    tenants, shared prefixes) and policy cells are other experiments, drawn in figures of their own
    (:mod:`batchperf.report.traffic_plots`), never as points on the batch-size curves."""
    return [c for c in cells if not c.cell.get("workload") and not c.cell.get("policy")]


class Series:
    """One line: cells that differ only in what is plotted along x (``batch_size``, ``concurrency`` or ``load``;
    the prompt length is the panel). Everything else is the series' identity: the run, model, backend, the other
    matrix axis, the policy, the workload (kind and spec), the load and the arrival. Named by the parts that vary
    across ``cells``, so a single-backend run reads 'hf-static'."""

    def __init__(self, cells: list[CellRecord], x: str = "batch_size") -> None:
        if x not in ("batch_size", "concurrency", "load"):
            raise ValueError(f"x: {x!r} is not batch_size, concurrency or load")
        self.x = x
        keys = [self.key(c) for c in cells]
        self.varying = [name for i, (name, _) in enumerate(keys[0]) if len({k[i] for k in keys}) > 1] if keys else []
        backends = sorted({c.backend for c in cells})
        self.cycle = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"]
        self.colors = {b: self.cycle[i % len(self.cycle)] for i, b in enumerate(backends)}

    def key(self, c: CellRecord) -> tuple[tuple[str, Any], ...]:
        """(part, value) for each part of a cell's identity but x (:func:`batchperf.report.identity.identity`): a
        policy's cells are a line of their own beside the same backend's fcfs cells (docs/policies.md), a
        workload's beside the synthetic ones."""
        return identity(c, self.x)

    def label(self, key: tuple[tuple[str, Any], ...]) -> str:
        parts = [dict(key)["backend"]]  # the backend is always named
        for name, value in key:
            if name in self.varying and name != "backend":
                parts.append(f"bs{value}" if name == "batch_size" else f"c{value}" if name == "concurrency"
                             else f"load {value:g}x" if name == "load" else str(value))
        return " ".join(parts)

    def style(self, key: tuple[tuple[str, Any], ...], index: int) -> dict[str, Any]:
        """Colour by backend when several are compared, else one colour per line."""
        markers = "osD^v<>p"
        color = self.colors[dict(key)["backend"]] if len(self.colors) > 1 else self.cycle[index % len(self.cycle)]
        return {"color": color, "marker": markers[index % len(markers)], "linestyle": ["-", "--", ":", "-."][index % 4]}


def _panels(plt: Any, rows: int, cols: int, title: str) -> tuple[Any, Any]:
    fig, axes = plt.subplots(rows, cols, figsize=(PANEL_W * cols, PANEL_H * rows + 0.6), squeeze=False)
    fig.suptitle(title, fontsize=13)
    return fig, axes


def _save(fig: Any, plt: Any, path: Path) -> Path:
    """The figure as a PNG at ``path``, written atomically: an interrupted report leaves the old plot or none."""
    png = io.BytesIO()
    try:
        fig.tight_layout()
        fig.savefig(png, format="png", dpi=90, bbox_inches="tight")  # long cell ids on an axis are never cut
    finally:
        plt.close(fig)
    atomic_write_bytes(path, png.getvalue())
    return path


def _from_zero(ax: Any) -> None:
    """Y from 0 (a ratio between points reads true), with headroom above the highest point for markers."""
    top = ax.dataLim.y1 if ax.has_data() else 1.0
    ax.set_ylim(0, top * 1.15 if top > 0 else 1.0)


def _batch_axis(ax: Any, xs: Iterable[int]) -> None:
    ticks = sorted(set(xs))
    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks, [str(t) for t in ticks])
    ax.minorticks_off()
    ax.set_xlabel("batch size")
    ax.grid(True, alpha=0.3)
    ax.margins(x=0.1)  # room for the knee's star and its label


def curves_over_batch(cells: list[CellRecord], path: Path, title: str,
                      rows: list[tuple[str, Callable[[CellRecord], float | None]]], mark_knee: bool = False,
                      identity_rows: tuple[int, ...] = ()) -> Path:
    """One row per metric, one panel per prompt length, one line per series, x = batch size; the rows in
    ``identity_rows`` also get a dotted y = batch size line (a value that can reach the batch size at most)."""
    plt = _pyplot()
    prompts = _prompt_order(cells) or ["(none)"]  # no batch-size cell (a traffic-only run): one empty panel
    series = Series(cells)
    fig, axes = _panels(plt, len(rows), len(prompts), title)
    for r, (ylabel, value) in enumerate(rows):
        for p, prompt in enumerate(prompts):
            ax = axes[r][p]
            here = [c for c in cells if c.prompt_label == prompt]
            keys = sorted({series.key(c) for c in here}, key=str)
            for i, key in enumerate(keys):
                pts = sorted((c.batch_size, value(c)) for c in here if series.key(c) == key and value(c) is not None)
                if not pts:
                    continue
                xs, ys = zip(*pts)
                ax.plot(xs, ys, label=series.label(key), **series.style(key, i))
                if mark_knee and (k := knee(xs, ys)) is not None:
                    y = dict(pts)[k]
                    ax.plot([k], [y], marker="*", markersize=16, color="gold", markeredgecolor="black", zorder=5)
                    ax.annotate(f"knee bs {k}", (k, y), textcoords="offset points", xytext=(6, -14), fontsize=8)
            if r in identity_rows and here:
                sizes = sorted({c.batch_size for c in here})
                ax.plot(sizes, sizes, color="gray", linestyle=":", linewidth=1, label="batch size")
            _batch_axis(ax, [c.batch_size for c in here])
            ax.set_ylabel(ylabel)
            ax.set_title(f"prompt {prompt}")
            _from_zero(ax)
            if ax.get_legend_handles_labels()[0]:  # a metric no cell has (a hand-edited file): no empty legend
                ax.legend(fontsize=8, loc=LEGEND_LOC)
    return _save(fig, plt, path)


def ttft_over_concurrency(cells: list[CellRecord], path: Path) -> Path:
    plt = _pyplot()
    prompts = _prompt_order(cells) or ["(none)"]
    series = Series(cells, x="concurrency")
    fig, axes = _panels(plt, 1, len(prompts), "TTFT vs concurrency (P99 solid, median dotted)")
    for p, prompt in enumerate(prompts):
        ax = axes[0][p]
        here = [c for c in cells if c.prompt_label == prompt]
        for i, key in enumerate(sorted({series.key(c) for c in here}, key=str)):
            mine = sorted((c for c in here if series.key(c) == key), key=lambda c: c.concurrency)
            xs = [c.concurrency for c in mine]
            style = series.style(key, i)
            ax.plot(xs, [c.metrics.get("p99_ttft_ms", math.nan) for c in mine], label=series.label(key),
                    **{**style, "linestyle": "-"})
            ax.plot(xs, [c.metrics.get("median_ttft_ms", math.nan) for c in mine],
                    **{**style, "linestyle": ":", "alpha": 0.6})
        ticks = sorted({c.concurrency for c in here})
        ax.set_xscale("log", base=2)
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.minorticks_off()
        ax.margins(x=0.1)
        ax.set(xlabel="concurrency (requests in flight)", ylabel="TTFT (ms)", title=f"prompt {prompt}")
        _from_zero(ax)
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8, loc=LEGEND_LOC)
    return _save(fig, plt, path)


def _itl_ms(cell: CellRecord) -> list[float]:
    """Every inter-token gap (ms) of every measured round (:func:`batchperf.measure.metrics.itl_samples`)."""
    return [1e3 * gap for trace in cell.run_traces() for gap in itl_samples(trace)]


def itl_distribution(cells: list[CellRecord], path: Path) -> Path | None:
    """Box plots of ITL per batch size; None when no cell kept its raw traces."""
    with_traces = [c for c in cells if c.traces]
    if not with_traces:
        return None
    plt = _pyplot()
    prompts = _prompt_order(with_traces)
    groups = sorted({(c.source, c.model_name, c.backend) for c in with_traces})
    fig, axes = _panels(plt, len(groups), len(prompts), "Inter-token latency distribution (raw traces, all rounds)")
    multi = len({g[:2] for g in groups}) > 1
    for g, group in enumerate(groups):
        for p, prompt in enumerate(prompts):
            ax = axes[g][p]
            here = [c for c in with_traces if (c.source, c.model_name, c.backend) == group and c.prompt_label == prompt]
            by_bs: dict[int, list[float]] = {}
            for c in here:
                by_bs.setdefault(c.batch_size, []).extend(_itl_ms(c))
            sizes = sorted(by_bs)
            if sizes:
                box = ax.boxplot([by_bs[b] for b in sizes], tick_labels=[str(b) for b in sizes], whis=(1, 99),
                                 showfliers=False, patch_artist=True)
                for patch in box["boxes"]:
                    patch.set_facecolor(Series(here).colors[group[2]])
                    patch.set_alpha(0.35)
            name = " ".join(group[:2]) + " " if multi else ""
            ax.set(xlabel="batch size", ylabel="ITL (ms)", title=f"{name}{group[2]} · prompt {prompt}")
            ax.set_ylim(bottom=0)
            ax.grid(True, axis="y", alpha=0.3)
    return _save(fig, plt, path)


def kv_growth_plot(cells: list[CellRecord], fits: list[KVGrowth], path: Path) -> Path | None:
    """Measured KV bytes per request vs tokens held, the analytic line and the fitted one; one panel per model.

    A point needs both figures: a cell without them (a backend with no KV figures, a record older than the tokens
    held) is left out, and None when no cell has both (the page says why)."""
    measured = [c for c in cells if c.kv.get("kv_bytes_per_request_mean") is not None
                and c.kv.get("kv_tokens_per_request_mean") is not None]
    if not measured:
        return None
    plt = _pyplot()
    panels = sorted({(c.source, c.model_name) for c in measured})
    multi = len({s for s, _ in panels}) > 1
    series = Series(measured)
    fig, axes = _panels(plt, 1, max(len(panels), 2), "KV-cache bytes per request vs tokens held")
    if len(panels) == 1:
        axes[0][1].set_visible(False)  # one model: keep the panel at its usual size, not stretched
    for m, (source, model) in enumerate(panels):
        ax = axes[0][m]
        here = [c for c in measured if (c.source, c.model_name) == (source, model)]
        top = max(c.kv["kv_tokens_per_request_mean"] for c in here)
        for i, backend in enumerate(sorted({c.backend for c in here})):
            mine = [c for c in here if c.backend == backend]
            ax.scatter([c.kv["kv_tokens_per_request_mean"] for c in mine],
                       [c.kv["kv_bytes_per_request_mean"] / MIB for c in mine],
                       color=series.colors[backend], marker="os^D"[i % 4], s=40, label=f"{backend} measured", zorder=3)
            fit = next((f for f in fits if (f.model, f.backend) == (model, backend)
                        and f.run in ("", source)), None)
            if fit is not None:
                ax.plot([0, top], [fit.intercept / MIB, (fit.intercept + fit.slope * top) / MIB],
                        color=series.colors[backend], linestyle="--", linewidth=1,
                        label=f"{backend} fit: {fit.slope:,.0f} B/token")
        analytic = here[0].kv.get("bytes_per_token_analytic")
        if analytic:
            ax.plot([0, top], [0, analytic * top / MIB], color="black", linewidth=1.5, alpha=0.6,
                    label=f"analytic: {analytic:,.0f} B/token", zorder=1)
        labels: dict[str, tuple[float, float]] = {}
        for c in sorted(here, key=lambda c: c.kv["kv_tokens_per_request_mean"]):  # the rightmost point of each
            labels[c.prompt_label] = (c.kv["kv_tokens_per_request_mean"], c.kv["kv_bytes_per_request_mean"] / MIB)
        for prompt, xy in labels.items():  # name each prompt length once: its cells' points nearly coincide
            ax.annotate(f"prompt {prompt}", xy, textcoords="offset points", xytext=(6, -12), fontsize=7, alpha=0.8)
        ax.set(xlabel="KV tokens held per request (prompt + generated)", ylabel="KV bytes per request (MiB)",
               title=f"{source} · {model}" if multi else model)
        ax.set_xlim(0, top * 1.2)
        _from_zero(ax)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8, loc=LEGEND_LOC)
    return _save(fig, plt, path)


def peak_memory(cell: CellRecord) -> tuple[float | None, str]:
    """The cell's peak memory (bytes) and what it is: torch's peak on CUDA, else the RSS peak sampled in the cell."""
    for key, name in (("torch_peak_allocated_bytes", "torch peak allocated"),
                      ("cell_peak_rss_bytes", "peak RSS during the cell")):
        if cell.telemetry.get(key) is not None:
            return float(cell.telemetry[key]), name
    return None, "none"


def memory_curves(cells: list[CellRecord], path: Path) -> Path:
    kinds = sorted({peak_memory(c)[1] for c in cells} - {"none"}) or ["none"]
    rows: list[tuple[str, Callable[[CellRecord], float | None]]] = [
        (f"{' / '.join(kinds)} (MiB)", lambda c: (v / MIB) if (v := peak_memory(c)[0]) is not None else None),
        ("KV cache peak (MiB)",
         lambda c: c.kv["kv_cache_peak_bytes"] / MIB if c.kv.get("kv_cache_peak_bytes") else None),
    ]
    return curves_over_batch(cells, path, "Peak memory vs batch size", rows)


def all_figures(cells: list[CellRecord], fits: list[KVGrowth], out: Path) -> list[tuple[str, Path | None]]:
    """Every batch-size figure of the report, written under ``out``: (caption key, path or None when there is no
    data). They draw the batch-size study only (:func:`batch_study`); ``cells`` are every cell of the results."""
    cells = batch_study(cells)
    return [
        ("throughput", curves_over_batch(
            cells, out / "throughput.png",
            f"Output throughput vs batch size (★ knee: first to reach {KNEE_FRACTION:.0%} of the max)",
            [("output tokens/s", lambda c: c.metrics.get("output_throughput"))], mark_knee=True)),
        ("latency", curves_over_batch(
            cells, out / "latency.png", "Tail latency vs batch size",
            [("P99 E2E latency (ms)", lambda c: c.metrics.get("p99_e2el_ms")),
             ("P99 TTFT (ms)", lambda c: c.metrics.get("p99_ttft_ms"))])),
        ("ttft_concurrency", ttft_over_concurrency(cells, out / "ttft_concurrency.png")),
        ("itl", itl_distribution(cells, out / "itl.png")),
        ("kv", kv_growth_plot(cells, fits, out / "kv_growth.png")),
        ("memory", memory_curves(cells, out / "memory.png")),
        ("counters", curves_over_batch(counted, out / "engine_counters.png", counter_plots.TITLE, counter_plots.rows(),
                                       identity_rows=(counter_plots.IDENTITY_ROW,))
         if (counted := counter_plots.with_counters(cells)) else None),
    ]
