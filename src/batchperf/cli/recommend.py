"""``batchperf recommend RESULTS.json --p99-e2el-ms MS``: the best batch size under latency SLOs."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path

from batchperf.cli.options import real


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results", type=Path, metavar="RESULTS.json", help="a results file of a batch-size sweep")
    parser.add_argument("--p99-e2el-ms", type=real(above=True), help="P99 end-to-end latency limit (ms)")
    parser.add_argument("--p99-ttft-ms", type=real(above=True), help="P99 time-to-first-token limit (ms)")
    parser.add_argument("--p99-tpot-ms", type=real(above=True), help="P99 time-per-output-token limit (ms)")
    parser.add_argument("--by", choices=("throughput", "goodput"), default="throughput",
                        help="rank the batch sizes that meet the SLOs by output throughput (default) or by goodput")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")


def main(args: argparse.Namespace) -> int:
    from batchperf.report.recommend import SLOTargets, recommend, render
    from batchperf.results.io import read_results

    try:
        slo = SLOTargets(args.p99_e2el_ms, args.p99_ttft_ms, args.p99_tpot_ms)
        recs = recommend(read_results(args.results).records, slo, args.by)
    except ValueError as exc:
        raise SystemExit(f"batchperf recommend: {exc}")
    if args.json:
        print(json.dumps({"slo": asdict(slo), "by": args.by, "groups": [asdict(r) for r in recs]}, indent=1))
    else:
        print(render(recs, slo))
    return 1 if any(r.batch_size is None for r in recs) else 0
