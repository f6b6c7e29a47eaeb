"""The report's HTML: one static page, the PNGs beside it, tables of the numbers behind them."""

from __future__ import annotations

import html
from collections.abc import Container
from pathlib import Path
from typing import Any

from batchperf.measure.kv_growth import DEFAULT_REL_TOL, KVGrowth
from batchperf.report.knee import KNEE_FRACTION, knee
from batchperf.report.plots import MIB, batch_study, peak_memory
from batchperf.results.io import ResultsFile, atomic_write_text
from batchperf.results.record import CellRecord

CAPTIONS: dict[str, tuple[str, str]] = {
    "throughput": ("Throughput", "Output tokens per second over the measured requests (median of rounds), one panel "
                   f"per prompt length. ★ marks the knee: the smallest batch size reaching {KNEE_FRACTION:.0%} of "
                   "that line's maximum; larger batches buy little more throughput."),
    "latency": ("Tail latency", "P99 end-to-end latency and P99 time to first token, from the client's send time "
                "(vllm bench serve definitions)."),
    "ttft_concurrency": ("TTFT vs concurrency", "How long a request waits for its first token as more requests are "
                         "in flight; one line per backend and batch size."),
    "itl": ("Inter-token latency", "Every gap between consecutive tokens of every measured request, from the raw "
            "traces; boxes span the quartiles, whiskers P1–P99."),
    "kv": ("KV-cache growth", "Measured KV bytes per request against the tokens it held; the black line is "
           "2 × layers × kv_heads × head_dim × dtype bytes per token (batchperf.measure.kv), dashed lines the fits."),
    "memory": ("Memory", "Peak memory of each cell (torch's peak allocated on CUDA, sampled process RSS on the "
               "CPU) and the backend's own KV-cache peak."),
    "counters": ("Engine counters", "What the engine reported doing (vLLM's metric names): the peak share of its "
                 "KV-cache pool in use, the batch it formed (requests per engine step; dotted: the batch size "
                 "allowed), and tokens per step. Backends without a counter have no line; the cells table gives "
                 "preemptions per round."),
    "attainment": ("SLO attainment vs offered load", "Requests meeting all their tenant's SLOs over requests offered "
                   "(a failed, cut-off or refused request is a miss), against the load factor each cell ran at "
                   "(--batchperf-load); one line per backend and batch size. The dotted line is the 90% target; a "
                   "bar on it is a `batchperf capacity` result: the bracket within which attainment falls below the "
                   "target (DistServe, Sarathi-Serve)."),
    "tenant_cdf": ("Latency per tenant", "TTFT and end-to-end latency of each tenant's requests, every round, as "
                   "cumulative distributions: how much of each tenant's traffic is served within a time."),
    "traffic_cells": ("Traffic and policy cells", "One bar per cell that replays a trace, mixes tenants, shares "
                      "prefixes or runs a batching policy other than fcfs: its output throughput and P99 end-to-end "
                      "latency. These cells are other experiments than the batch-size study, so they are never "
                      "points on its curves above; their attainment is drawn against load below."),
    "hardware": ("Hardware upgrade: did each cell scale?", "Results of two machines (the first file is the old "
                 "machine): per cell, the measured new / old output throughput (bar; green: scaled as the hardware "
                 "predicts, red: lost efficiency, blue: beat the prediction, grey: no prediction) and the prediction "
                 "for its bound (black mark, whisker: the tolerance): GEMM-bound cells by the GEMM probe (or the "
                 "GPU's peak FLOP/s), bandwidth-bound by the copy probe (or peak bandwidth), dispatch-bound by the "
                 "interpreter probe (docs/baselines.md)."),
    "timeline": ("One run, over time", "The last round of one cell (a tenant cell where there is one): requests sent, "
                 "waiting (sent, not yet admitted), running (admitted, not finished) and the KV tokens they hold "
                 "(prompt + generated so far, from the trace), stacked per tenant."),
}
NO_DATA = {"itl": "the cells kept no raw traces", "counters": "no cell has engine counters",
           "kv": "no cell measured both its KV bytes and the tokens it held per request",
           "attainment": "no cell stores SLO attainment",
           "tenant_cdf": "no cell with tenants kept its raw traces",
           "traffic_cells": "every cell is a synthetic batch-size cell under fcfs",
           "hardware": "the results files are of one machine", "timeline": "the cells kept no raw traces"}

CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1320px; color: #222; }
h1 { margin-bottom: 0.2em; } h2 { border-bottom: 1px solid #ccc; padding-bottom: 0.2em; margin-top: 1.6em; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.6em 0; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: right; }
th { background: #f3f3f3; } td.l, th.l { text-align: left; white-space: nowrap; }
img { max-width: 100%; border: 1px solid #eee; } .caption { color: #555; max-width: 70em; }
.bad { color: #b00020; font-weight: 600; } .ok { color: #1b7f2a; } .meta { color: #555; font-size: 0.9em; }
"""


def _fmt(value: Any, spec: str = ",.1f") -> str:
    return "–" if value is None else format(value, spec)


def _table(header: list[str], rows: list[list[str]], left: Container[int] = (0,)) -> str:
    """Numbers right-aligned, the columns in ``left`` (text) left-aligned; cells are HTML already."""
    th = "".join(f'<th class="{"l" if i in left else ""}">{html.escape(h)}</th>' for i, h in enumerate(header))
    body = "".join(
        "<tr>" + "".join(f'<td class="{"l" if i in left else ""}">{cell}</td>' for i, cell in enumerate(row)) + "</tr>"
        for row in rows)
    return f"<table><tr>{th}</tr>{body}</table>"


def _runs(files: list[ResultsFile]) -> str:
    rows = []
    for f in files:
        machine, commit = f.machine_info, f.commit_info
        rows.append([html.escape(f.name), html.escape(f.datetime or "–"),
                     html.escape(f"{machine.get('cpu', {}).get('brand_raw', machine.get('processor', '–'))}"),
                     html.escape(str(machine.get("python_version", "–"))),
                     html.escape(str(commit.get("id", "–"))[:10] + (" (dirty)" if commit.get("dirty") else "")),
                     str(len(f.cells))])
    return _table(["results file", "date", "machine", "python", "commit", "cells"], rows, left=range(5))


def _knees(cells: list[CellRecord]) -> str:
    groups: dict[tuple[Any, ...], list[CellRecord]] = {}
    for c in cells:
        groups.setdefault((c.source, c.model_name, c.backend, c.prompt_label, c.concurrency), []).append(c)
    rows = []
    order = sorted(groups.items(), key=lambda kv: (kv[0][:3], kv[1][0].prompt_tokens, kv[0][4]))
    for (source, model, backend, prompt, conc), mine in order:
        mine.sort(key=lambda c: c.batch_size)
        ys = [c.metrics.get("output_throughput") for c in mine]
        k = knee([c.batch_size for c in mine], ys)
        at = next((c for c in mine if c.batch_size == k), None)
        best = max(mine, key=lambda c: c.metrics.get("output_throughput", 0.0))
        rows.append([html.escape(f"{source} · {model} · {backend}"), html.escape(prompt), str(conc),
                     " ".join(str(c.batch_size) for c in mine), str(best.batch_size),
                     _fmt(best.metrics.get("output_throughput")), str(k),
                     _fmt(at.metrics.get("output_throughput") if at else None),
                     _fmt(at.metrics.get("p99_e2el_ms") if at else None)])
    return _table(["run · model · backend", "prompt", "conc.", "batch sizes", "best bs", "max tok/s", "knee bs",
                   "tok/s at knee", "P99 E2EL ms at knee"], rows, left=(0, 1))


def _kv_table(fits: list[KVGrowth], skipped: list[str]) -> str:
    rows = [[html.escape(" · ".join(p for p in (f.run, f.model, f.backend) if p)), str(len(f.tokens)),
             _fmt(f.slope), _fmt(f.analytic, ",.0f"),
             _fmt(100 * f.relative_error, "+.2f") + "%", _fmt(round(f.intercept), ",d"),  # an int: never "-0"
             '<span class="ok">agrees</span>' if f.agrees() else '<span class="bad">DIFFERS</span>'] for f in fits]
    notes = "".join(f'<p class="meta">{html.escape(s)}</p>' for s in skipped)
    return _table(["model · backend", "cells", "fitted B/token", "analytic B/token", "difference", "intercept B",
                   f"within {DEFAULT_REL_TOL:.0%}"], rows) + notes


def _cells_table(cells: list[CellRecord]) -> str:
    rows = []
    several = len({c.source for c in cells}) > 1
    for c in sorted(cells, key=lambda c: (c.source, c.model_name, c.backend, c.prompt_tokens, c.batch_size, c.concurrency)):
        m, t = c.metrics, c.telemetry
        mem, _ = peak_memory(c)
        errors = len(c.token_count_errors) + int(m.get("failed", 0))
        nvml = str(t.get("nvml", "–"))
        rows.append([html.escape(f"{c.source}: {c.id}" if several else c.id) + _client_mark(c),
                     _fmt(m.get("output_throughput")),
                     _fmt(m.get("request_throughput"), ".2f"), _fmt(m.get("p99_e2el_ms")), _fmt(m.get("p99_ttft_ms")),
                     _fmt(m.get("median_itl_ms"), ".2f"), _fmt(mem / MIB if mem else None, ",.0f"),
                     _fmt(t.get("joules_per_output_token"), ".3f"),
                     *_efficiency_cells(c),
                     f'<span title="{html.escape(nvml)}">{html.escape(nvml.split(":")[0])}</span>',
                     _counter(c, "num_preemptions", ".3g"), _counter(c, "padding_waste", ".1%"),
                     f'<span class="bad">{errors}</span>' if errors else "0"])
    return _table(["cell", "out tok/s", "req/s", "P99 E2EL ms", "P99 TTFT ms", "median ITL ms", "peak MiB",
                   "J/token", "decode MBU", "prefill MFU", "NVML", "preempt / round", "padding", "errors"], rows,
                  left=(0, 10))


def _client_mark(cell: CellRecord) -> str:
    """" CLIENT-BOUND" (the reasons as its tooltip) for a cell whose client, not its server, set its latency."""
    if not cell.client.get("client_bound"):
        return ""
    why = "; ".join(cell.client.get("reasons") or [])
    return f' <span class="bad" title="{html.escape(why)}">CLIENT-BOUND</span>'


def _client_notes(cells: list[CellRecord]) -> str:
    bound = [c for c in cells if c.client.get("client_bound")]
    if not bound:
        return ""
    items = "".join(f"<li>{html.escape(c.id)}: {html.escape('; '.join(c.client.get('reasons') or []))}</li>"
                    for c in bound)
    return ("<p class='meta'>CLIENT-BOUND: the client fell behind the server in these cells (docs/measurement.md, "
            "the client-lag check); their latencies describe the client, not the server, and the gate does not "
            f"judge them.</p><ul class='meta'>{items}</ul>")


def _slo_table(cells: list[CellRecord]) -> str:
    """Attainment, goodput and tail latencies per tenant, and the cell's fairness (batchperf.measure.slo)."""
    rows = []
    for c in sorted((c for c in cells if c.slo), key=lambda c: c.id):
        for tenant, t in sorted(c.tenants.items()):
            rows.append([html.escape(c.id), html.escape(tenant or "(all)"), _fmt(100 * t.get("attainment", 0), ".1f"),
                         f"{int(t.get('met', 0))} / {int(t.get('offered', 0))}", _fmt(t.get("request_goodput"), ".3g"),
                         _fmt(t.get("p99_ttft_ms")), _fmt(t.get("p99_tpot_ms"), ".2f"), _fmt(t.get("p99_e2el_ms")),
                         _fmt(c.slo.get("jain_fairness"), ".3f"), _fmt(c.slo.get("max_service_gap_tokens"), ",.0f")])
    return _table(["cell", "tenant", "attainment %", "met / offered", "goodput req/s", "P99 TTFT ms", "P99 TPOT ms",
                   "P99 E2EL ms", "Jain (cell)", "max gap tokens (cell)"], rows, left=(0, 1))


def _counter(cell: CellRecord, name: str, spec: str) -> str:
    """An engine counter, or "–" with the reason it is absent as the tooltip."""
    value = cell.counters.get(name)
    if value is not None:
        return format(value, spec)
    why = (cell.counters.get("absent") or {}).get(name, "not in these results")
    return f'<span title="{html.escape(why)}">–</span>'


def _efficiency_cells(c: CellRecord) -> list[str]:
    """Decode MBU and prefill MFU as percentages; the achieved rate, or why there is no ratio, in the tooltip."""
    e = c.efficiency
    out = []
    for ratio, rate, unit, scale in (("decode_mbu", "decode_bandwidth_bytes_per_s", "GB/s", 1e9),
                                     ("prefill_mfu", "prefill_flops_per_s", "TFLOP/s", 1e12)):
        achieved = e.get(rate)
        why = [f"{achieved / scale:,.3g} {unit} achieved on {e.get('device')}"] if achieved else []
        if e.get(ratio) is None:
            why.append(e.get("note") or e.get("peak_source") or "not measured")
        text = "–" if e.get(ratio) is None else f"{100 * e[ratio]:.1f}%"
        out.append(f'<span title="{html.escape("; ".join(why))}">{text}</span>')
    return out


def write_page(out: Path, cells: list[CellRecord], files: list[ResultsFile],
               figures: list[tuple[str, Path | None]], fits: list[KVGrowth], skipped: list[str]) -> Path:
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>batchperf report</title>"
             f"<style>{CSS}</style></head><body>",
             "<h1>batchperf report</h1>",
             f'<p class="meta">{len(cells)} cells from {len(files)} results file(s). Every number is the median over '
             "the measured rounds; warm-up requests and rounds are excluded.</p>",
             _runs(files),
             "<h2>Knees and best batch sizes</h2>", _knees(batch_study(cells))]
    for key, path in figures:
        title, caption = CAPTIONS[key]
        parts.append(f"<h2>{html.escape(title)}</h2><p class='caption'>{html.escape(caption)}</p>")
        if path is None:
            parts.append(f"<p class='meta'>No data for this figure in these results "
                         f"({NO_DATA.get(key, 'no measured KV bytes')}).</p>")
        else:
            parts.append(f"<img src='{html.escape(path.name)}' alt='{html.escape(title)}'>")
        if key == "kv":
            parts.append(_kv_table(fits, skipped))
        if key == "attainment" and any(c.slo for c in cells):
            parts.append(_slo_table(cells))
    parts += ["<h2>All cells</h2>", _cells_table(cells), _client_notes(cells), "</body></html>"]
    index = out / "index.html"
    atomic_write_text(index, "\n".join(parts))
    return index
