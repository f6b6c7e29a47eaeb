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
    from batchperf.results.io import read_results
    from batchperf.results.record import ResultsError

    if problem := _usage_problem(args):  # before anything is read, written or pushed
        raise SystemExit(f"batchperf export: {problem}")
    try:
        results = read_results(args.results)
        if why := results.incomplete:
            print(f"note: {args.results} is from an incomplete run ({why}); its unfinished cells have no samples",
                  file=sys.stderr)
        points = _change_points(args.history) if args.history is not None else None
        text = openmetrics(results, points)
        if args.out is not None:
            _write(args.out, text)
            print(f"batchperf export: wrote {args.out} ({len(results.records)} cells)", file=sys.stderr)
        elif args.push is None:
            sys.stdout.write(text)
        if args.push is not None:
            key = push(results, args.push, args.job, points)
            print(f"batchperf export: pushed {len(results.records)} cells to {args.push} "
                  f"(job {args.job}, fingerprint {key['fingerprint']})", file=sys.stderr)
    except (ResultsError, ExportError) as exc:
        raise SystemExit(f"batchperf export: {exc}") from None
    except KeyboardInterrupt:
        print("batchperf export: interrupted (Ctrl-C); the results file is unchanged"
              + (f"; the push to {args.push} may or may not have landed: push again" if args.push else ""),
              file=sys.stderr)
        raise SystemExit(130) from None
    return 0


def _usage_problem(args: argparse.Namespace) -> str | None:
    """What makes this export impossible, found before the results file is read."""
    from batchperf.measure.urls import url_problem

    if args.push is not None and (why := url_problem(args.push, bare_host_ok=True)):
        return f"--push {args.push!r}: {why}; give the Pushgateway's URL, e.g. http://HOST:9091"
    if args.push is not None and not args.job.strip():
        return "--job is empty: the Pushgateway groups a push by its job; give a name (default batchperf)"
    if args.out is not None:
        if args.out.resolve() == args.results.resolve() or (
                args.out.exists() and args.results.exists() and args.out.samefile(args.results)):
            return f"--out {args.out} is the results file itself: it would be replaced by OpenMetrics text; " \
                   "give another file"
        if args.out.is_dir():
            return f"--out {args.out}: is a folder; give a file path, e.g. {args.out / 'batchperf.om'}"
    return None


def _write(out: Path, text: str) -> None:
    """``text`` into ``out`` atomically; a SystemExit saying why and that nothing was written (an older ``out``
    is kept whole) when the folder cannot be made or the disk is full."""
    from batchperf.results.io import atomic_write_text

    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(out, text)
    except OSError as exc:
        raise SystemExit(f"batchperf export: --out {out}: cannot write it ({exc.strerror or exc}); nothing was "
                         "written" + (" (an older file there is unchanged)" if out.is_file() else "")
                         + "; free space, or give a writable file path") from None


def _change_points(folder: Path) -> list:
    from batchperf.report.export import history_change_points

    return history_change_points(folder)
