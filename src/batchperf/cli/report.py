"""``batchperf report RESULTS.json [more.json ...] --out DIR``: a static HTML page with PNG plots."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results", nargs="+", type=Path, metavar="RESULTS.json",
                        help="results files written by `pytest perf_tests --benchmark-json=...`")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR",
                        help="folder for index.html and the PNGs (created; existing figures are replaced)")


def main(args: argparse.Namespace) -> int:
    from batchperf.report import build_report

    try:
        index = build_report(args.results, args.out)
    except ValueError as exc:
        raise SystemExit(f"batchperf report: {exc}") from None
    except OSError as exc:  # a full disk, a read-only folder, a file where the folder should be
        where = f" ({exc.filename})" if exc.filename else ""
        raise SystemExit(f"batchperf report: cannot write the report into {args.out}{where}: "
                         f"{exc.strerror or exc}; free space or give another --out (the results are only read; "
                         "figures already written there may be from this run or an older one)") from None
    print(f"batchperf report: wrote {index}")
    return 0
