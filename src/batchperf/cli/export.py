"""``batchperf export RESULTS.json --format openmetrics [--out FILE] [--push URL]``: results into Prometheus.

Writes every cell's metrics as OpenMetrics text (stdout, or ``--out FILE``), and with ``--push`` sends the
run to a Pushgateway, grouped by job and hardware fingerprint (:mod:`batchperf.report.export`). The results
file is only read.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from batchperf.report.export import DEFAULT_JOB


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results", type=Path, metavar="RESULTS.json", help="a results file (pytest --benchmark-json)")
    parser.add_argument("--format", choices=["openmetrics"], default="openmetrics",
                        help="the text format written (default and only: openmetrics)")
    parser.add_argument("--out", type=Path, default=None, metavar="FILE", help="write the text to FILE (default: stdout)")
    parser.add_argument("--push", default=None, metavar="URL",
                        help="also push the run to the Prometheus Pushgateway at URL (e.g. http://HOST:9091); it "
                             "replaces this machine's previous push (grouping: job and fingerprint)")
    parser.add_argument("--job", default=DEFAULT_JOB, help=f"the Pushgateway job (default {DEFAULT_JOB})")
    parser.add_argument("--history", type=Path, default=None, metavar="DIR",
                        help="add the change points `batchperf history DIR` finds (for dashboard annotations)")


def main(args: argparse.Namespace) -> int:
    from batchperf.report.export import ExportError, openmetrics, push
    from batchperf.results.io import atomic_write_text, read_results
    from batchperf.results.record import ResultsError

    try:
        results = read_results(args.results)
        points = _change_points(args.history) if args.history is not None else None
        text = openmetrics(results, points)
        if args.out is not None:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(args.out, text)
            print(f"batchperf export: wrote {args.out} ({len(results.records)} cells)", file=sys.stderr)
        elif args.push is None:
            sys.stdout.write(text)
        if args.push is not None:
            key = push(results, args.push, args.job, points)
            print(f"batchperf export: pushed {len(results.records)} cells to {args.push} "
                  f"(job {args.job}, fingerprint {key['fingerprint']})", file=sys.stderr)
    except (ResultsError, ExportError) as exc:
        raise SystemExit(f"batchperf export: {exc}") from None
    return 0


def _change_points(folder: Path) -> list:
    from batchperf.report.export import history_change_points

    return history_change_points(folder)
