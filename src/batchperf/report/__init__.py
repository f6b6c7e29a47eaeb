"""The HTML report (``batchperf report``): a static page with PNG plots of one or more results files.

``DIR/index.html`` shows throughput (knees marked), tail latency, TTFT vs
concurrency, the ITL distribution, KV-cache growth against the analytic line,
peak memory (the batch-size study: synthetic cells under fcfs), one bar per traffic or policy cell, SLO attainment
against offered load, per-tenant latency CDFs and the timeline of one run, with the
tables behind them; given files of two machines, how each cell scaled against what the
hardware predicts. Several results files (e.g.
before and after an upgrade) are drawn as separate lines, named by file.
"""

from __future__ import annotations

from pathlib import Path


def build_report(results: list[Path], out: Path) -> Path:
    """Write the report for ``results`` into ``out``; returns the path of ``index.html``."""
    from batchperf.measure.kv_growth import kv_growth
    from batchperf.report.hardware_plots import scaling_figure
    from batchperf.report.page import write_page
    from batchperf.report.plots import all_figures
    from batchperf.report.traffic_plots import traffic_figures
    from batchperf.results.io import read_many

    files = read_many(results)
    cells = [rec for f in files for rec in f.records]
    out.mkdir(parents=True, exist_ok=True)
    fits, skipped = [], []
    for run in files:  # each results file fitted on its own: an upgrade may change the slope
        run_fits, run_skipped = kv_growth((c.kv_point() for c in run.records), run=run.name if len(files) > 1 else "")
        fits += run_fits
        skipped += run_skipped
    figures = all_figures(cells, fits, out) + traffic_figures(cells, out)
    if len(files) > 1:  # two machines: how each cell scaled (a single file has nothing to scale against)
        figures.append(("hardware", scaling_figure(files, out / "hardware_scaling.png")))
    return write_page(out, cells, files, figures, fits, skipped)
