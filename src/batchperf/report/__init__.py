"""``batchperf report RESULTS.json [more.json ...] --out DIR``: a static HTML page with PNG plots.

``DIR/index.html`` shows throughput (knees marked), tail latency, TTFT vs
concurrency, the ITL distribution, KV-cache growth against the analytic line,
and peak memory, with the tables behind them. Several results files (e.g.
before and after an upgrade) are drawn as separate lines, named by file.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results", nargs="+", type=Path, metavar="RESULTS.json",
                        help="results files written by `pytest perf_tests --benchmark-json=...`")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR",
                        help="folder for index.html and the PNGs (created; existing figures are replaced)")


def build_report(results: list[Path], out: Path) -> Path:
    """Write the report for ``results`` into ``out``; returns the path of ``index.html``."""
    from batchperf.results.runs import load_runs
    from batchperf.measure.kv_growth import kv_growth
    from batchperf.report.page import write_page
    from batchperf.report.plots import all_figures

    cells, runs = load_runs(results)
    if len({r["name"] for r in runs}) < len(runs):
        raise ValueError("two results files share a name; the report tells runs apart by file name: rename one")
    out.mkdir(parents=True, exist_ok=True)
    fits, skipped = [], []
    for run in runs:  # each results file fitted on its own: an upgrade may change the slope
        run_fits, run_skipped = kv_growth([c.info for c in cells if c.source == run["name"]],
                                          run=run["name"] if len(runs) > 1 else "")
        fits += run_fits
        skipped += run_skipped
    figures = all_figures(cells, fits, out)
    return write_page(out, cells, runs, figures, fits, skipped)


def main(args: argparse.Namespace) -> int:
    try:
        index = build_report(args.results, args.out)
    except ValueError as exc:
        raise SystemExit(f"batchperf report: {exc}")
    print(f"batchperf report: wrote {index}")
    return 0
