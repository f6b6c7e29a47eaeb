"""The report's traffic figures (issue 24): attainment against offered load, per-tenant latency CDFs, and the
timeline of one run.

- *Attainment vs offered load*: the plot serving papers draw (DistServe, Sarathi-Serve): one line per backend (and
  batch size where several), x = the load factor a cell ran at, y = SLO attainment; the dotted line is the target,
  and a ``batchperf capacity`` result is drawn as its bracket on the target line.
- *Per-tenant CDFs*: TTFT and E2E latency of each tenant's requests, from the raw traces (every round).
- *Timeline*: one run (the last round of one cell): per tenant, requests sent (cumulative), waiting (sent, not yet
  admitted), running (admitted, not finished) and the KV tokens they hold (prompt + tokens generated so far: the
  trace's own view of the cache, not the engine's counter).
"""

from __future__ import annotations

from operator import attrgetter
from pathlib import Path
from typing import Any

import numpy as np

from batchperf.measure.slo import NO_TENANT, tenant_of, tenants
from batchperf.measure.trace import RunTrace
from batchperf.report.plots import LEGEND_LOC, PANEL_H, PANEL_W, Series, _pyplot, _save, batch_study, legend_label
from batchperf.results.record import CellRecord

TARGET = 0.9  # the attainment line drawn (DistServe's 90%)
TIMELINE_ROWS = ("sent (cumulative)", "waiting", "running", "KV tokens held")


def _group(c: CellRecord) -> str:
    return f"{c.model_name} · prompt {c.prompt_label} · {c.cell.get('workload', 'synthetic')}"


def attainment_vs_load(cells: list[CellRecord], path: Path) -> Path | None:
    """One panel per model × prompt × workload; None when no cell stores attainment (results before issue 24)."""
    measured = [c for c in cells if c.value("slo.attainment") is not None and not c.capacity]
    searched = [c for c in cells if c.capacity]
    if not measured and not searched:
        return None
    plt = _pyplot()
    groups = sorted({_group(c) for c in measured + searched})
    fig, axes = plt.subplots(1, len(groups), figsize=(PANEL_W * 1.2 * len(groups), PANEL_H + 0.8), squeeze=False)
    fig.suptitle("SLO attainment vs offered load", fontsize=13)
    series = Series(measured + searched, x="load")
    for ax, group in zip(axes[0], groups):
        lines: dict[tuple[Any, ...], list[CellRecord]] = {}
        for c in (c for c in measured if _group(c) == group):
            lines.setdefault(series.key(c), []).append(c)
        for i, (key, mine) in enumerate(sorted(lines.items(), key=lambda kv: str(kv[0]))):
            mine.sort(key=attrgetter("load"))
            ax.plot([c.load for c in mine], [100 * c.value("slo.attainment") for c in mine],
                    label=series.label(key), **series.style(key, i))
        for c in (c for c in searched if _group(c) == group):
            cap = c.capacity
            # the fit's interval; a search before issue 57 stored its bracket [max_load, bracket_high] instead
            low, high = cap.get("interval_low", cap["max_load"]), cap.get("interval_high", cap.get("bracket_high"))
            high = cap["max_load"] if high is None else high
            target = 100 * cap.get("target_attainment", TARGET)
            ax.errorbar([(low + high) / 2], [target], xerr=[[(high - low) / 2], [(high - low) / 2]], fmt="none",
                        capsize=6, linewidth=2.5, color=series.colors.get(c.backend, "black"),
                        label=f"capacity {c.backend} bs{c.batch_size}: {cap['max_load']:.3g}x")
        ax.axhline(100 * TARGET, color="grey", linestyle=":", linewidth=1, label=f"target {TARGET:.0%}")
        ax.set(xlabel="offered load (x the workload's rate)", ylabel="SLO attainment (%)", title=group, ylim=(0, 105))
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="lower left")
    return _save(fig, plt, path)


def _with_tenants(cells: list[CellRecord]) -> list[CellRecord]:
    return [c for c in cells if c.traces and any(t != NO_TENANT for t in c.tenants)]


def tenant_cdfs(cells: list[CellRecord], path: Path, most: int = 4) -> Path | None:
    """TTFT and E2EL CDFs per tenant for up to ``most`` cells with tenants; None when none has them."""
    chosen = _with_tenants(cells)[:most]
    if not chosen:
        return None
    plt = _pyplot()
    fig, axes = plt.subplots(len(chosen), 2, figsize=(PANEL_W * 2, PANEL_H * len(chosen) + 0.6), squeeze=False)
    fig.suptitle("Latency per tenant (CDF over every request of every round)", fontsize=13)
    for row, cell in zip(axes, chosen):
        traces = cell.run_traces()
        for ax, (name, of) in zip(row, (("TTFT", lambda r: r.ttft), ("E2E latency", lambda r: r.e2el))):
            for tenant in sorted({tenant_of(r) for t in traces for r in t.requests}):
                values = np.sort([1e3 * of(r) for t in traces for r in t.requests
                                  if tenant_of(r) == tenant and r.error is None and r.token_times])
                if len(values):
                    ax.step(values, np.arange(1, len(values) + 1) / len(values), where="post",
                            label=legend_label(f"{tenant or 'all'} (n={len(values)})"))
            ax.set(xlabel=f"{name} (ms)", ylabel="share of requests", title=f"{cell.id}", ylim=(0, 1.02))
            ax.title.set_fontsize(8)
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=7, loc="lower right")
    return _save(fig, plt, path)


def timeline(trace: RunTrace, tenant: str | None = None, points: int = 400) -> dict[str, np.ndarray]:
    """The run's state over time (s) for ``tenant``'s requests (None: all): each of :data:`TIMELINE_ROWS` at
    ``points`` instants from the start to the end."""
    mine = [r for r in trace.requests if tenant is None or tenant_of(r) == tenant]
    times = np.linspace(trace.start, trace.end, points)
    sent = np.array([r.start for r in mine])
    admitted = np.array([r.scheduled for r in mine])
    done = np.array([r.finished for r in mine])
    out = {"time": times}
    if not mine:
        return out | {row: np.zeros(points) for row in TIMELINE_ROWS}
    at = times[:, None]  # [points, 1] against [requests]
    out[TIMELINE_ROWS[0]] = (sent[None, :] <= at).sum(axis=1).astype(float)
    out[TIMELINE_ROWS[1]] = ((sent[None, :] <= at) & (at < admitted[None, :])).sum(axis=1).astype(float)
    running = (admitted[None, :] <= at) & (at < done[None, :])
    out[TIMELINE_ROWS[2]] = running.sum(axis=1).astype(float)
    generated = np.array([np.searchsorted(np.asarray(r.token_times), times, side="right") for r in mine]).T
    held = np.array([r.prompt_len for r in mine])[None, :] + generated
    out[TIMELINE_ROWS[3]] = (held * running).sum(axis=1).astype(float)
    return out


def run_timeline(cells: list[CellRecord], path: Path) -> Path | None:
    """The last round of one cell (the first with tenants, else the first open-loop one, else the first with raw
    traces): one row per quantity, one stacked band per tenant. None when no cell kept raw traces."""
    kept = [c for c in cells if c.traces]
    if not kept:
        return None
    open_loop = [c for c in kept if c.raw("workload.open_loop") is True]
    cell = (_with_tenants(kept) or open_loop or kept)[0]
    trace = cell.run_traces()[-1]
    names = tenants(trace)
    plt = _pyplot()
    fig, axes = plt.subplots(len(TIMELINE_ROWS), 1, figsize=(PANEL_W * 2.2, PANEL_H * 0.8 * len(TIMELINE_ROWS)),
                             sharex=True, squeeze=False)
    fig.suptitle(f"One run: {cell.id} (last round)", fontsize=11)
    lines = {t: timeline(trace, t) for t in names}
    for ax, row in zip(axes[:, 0], TIMELINE_ROWS):
        ax.stackplot(lines[names[0]]["time"], *[lines[t][row] for t in names], labels=[t or "all" for t in names],
                     alpha=0.7, step="post")
        ax.set_ylabel(row, fontsize=8)
        ax.grid(True, alpha=0.3)
    axes[0, 0].legend(fontsize=7, loc=LEGEND_LOC)
    axes[-1, 0].set_xlabel("time since the run's start (s)")
    return _save(fig, plt, path)


def traffic_cells(cells: list[CellRecord], path: Path) -> Path | None:
    """One horizontal bar per traffic or policy cell (not drawn on the batch-size curves): output throughput and
    P99 E2E latency, labelled by the cell's id. None when every cell is of the batch-size study."""
    study = {id(c) for c in batch_study(cells)}
    mine = sorted((c for c in cells if id(c) not in study and not c.capacity), key=lambda c: (c.source, c.id))
    if not mine:
        return None
    plt = _pyplot()
    names = [f"{c.source}: {c.id}" if len({c.source for c in mine}) > 1 else c.id for c in mine]
    fig, axes = plt.subplots(1, 2, figsize=(PANEL_W * 3, 0.35 * len(mine) + 1.4), squeeze=False, sharey=True)
    fig.suptitle("Traffic and policy cells (one bar per cell)", fontsize=13)
    series = Series(mine)
    for ax, (xlabel, metric) in zip(axes[0], (("output tokens/s", "output_throughput"),
                                              ("P99 E2E latency (ms)", "p99_e2el_ms"))):
        ax.barh(range(len(mine)), [c.metrics.get(metric, 0.0) for c in mine],
                color=[series.colors[c.backend] for c in mine], alpha=0.8)
        ax.set(xlabel=xlabel)
        ax.grid(True, axis="x", alpha=0.3)
    axes[0, 0].set_yticks(range(len(mine)), names, fontsize=7)
    axes[0, 0].invert_yaxis()  # the first cell on top, as in the table
    return _save(fig, plt, path)


def traffic_figures(cells: list[CellRecord], out: Path) -> list[tuple[str, Path | None]]:
    return [("traffic_cells", traffic_cells(cells, out / "traffic_cells.png")),
            ("attainment", attainment_vs_load(cells, out / "attainment_vs_load.png")),
            ("tenant_cdf", tenant_cdfs(cells, out / "tenant_latency_cdf.png")),
            ("timeline", run_timeline(cells, out / "run_timeline.png"))]
