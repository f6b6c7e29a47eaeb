"""``batchperf merge``: join per-shard results files (``--batchperf-shard=I/N``) into one results file."""

from __future__ import annotations

import argparse
from pathlib import Path

from batchperf.results.merge import merge_files
from batchperf.results.record import ResultsError


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("shards", nargs="+", type=Path, metavar="SHARD.json", help="per-shard results files")
    parser.add_argument("--out", type=Path, required=True, help="merged results JSON to write")


def main(args: argparse.Namespace) -> int:
    try:
        count = merge_files(list(args.shards), args.out)
    except ResultsError as exc:
        raise SystemExit(f"batchperf merge: {exc}") from None
    print(f"batchperf merge: {count} cells from {len(args.shards)} shard(s) -> {args.out}")
    return 0
