"""``batchperf recommend RESULTS.json --p99-e2el-ms MS``: the best batch size under latency SLOs; with
``--by capacity``, the batching policy and batch size with the most capacity under SLOs (from ``batchperf capacity``
results, or a ``--batchperf-load`` sweep, over ``--batchperf-policies`` too)."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path

from batchperf.cli.options import real


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results", type=Path, nargs="+", metavar="RESULTS.json",
                        help="results of a batch-size sweep (several files: e.g. one capacity search per batch size)")
    parser.add_argument("--p99-e2el-ms", type=real(above=True), help="P99 end-to-end latency limit (ms)")
    parser.add_argument("--p99-ttft-ms", type=real(above=True), help="P99 time-to-first-token limit (ms)")
    parser.add_argument("--p99-tpot-ms", type=real(above=True), help="P99 time-per-output-token limit (ms)")
    parser.add_argument("--by", choices=("throughput", "goodput", "capacity"), default="throughput",
                        help="rank the batch sizes that meet the SLOs by output throughput (default) or by goodput; "
                             "capacity: each (policy, batch size) by the highest offered load at which SLO "
                             "attainment >= --target, the best named with its policy (docs/policies.md)")
    group = parser.add_argument_group("--by capacity")
    group.add_argument("--target", type=real(above=True), default=0.9,
                       help="attainment a load must reach, a ratio in (0, 1] (default 0.9)")
    group.add_argument("--ttft-ms", type=real(above=True), help="per-request TTFT SLO (ms) every request is held to; "
                       "default: each workload's own SLOs, as stored")
    group.add_argument("--tpot-ms", type=real(above=True), help="per-request TPOT SLO (ms), as --ttft-ms")
    group.add_argument("--e2el-ms", type=real(above=True), help="per-request E2E latency SLO (ms), as --ttft-ms")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")


def main(args: argparse.Namespace) -> int:
    from batchperf.results.io import read_many

    try:
        records = [r for f in read_many(args.results) for r in f.records]
        if args.by == "capacity":
            return _capacity(args, records)
        from batchperf.report.recommend import SLOTargets, recommend, render

        slo = SLOTargets(args.p99_e2el_ms, args.p99_ttft_ms, args.p99_tpot_ms)
        recs = recommend(records, slo, args.by)
    except ValueError as exc:
        raise SystemExit(f"batchperf recommend: {exc}")
    if args.json:
        print(json.dumps({"slo": asdict(slo), "by": args.by, "groups": [asdict(r) for r in recs]}, indent=1))
    else:
        print(render(recs, slo))
    return 1 if any(r.batch_size is None for r in recs) else 0


def _capacity(args: argparse.Namespace, records: list) -> int:
    from batchperf.measure.metrics import SLO
    from batchperf.report.recommend import recommend_capacity, render_capacity

    slo = SLO(args.ttft_ms, args.tpot_ms, args.e2el_ms)
    slo = slo if slo.any else None
    choices = recommend_capacity(records, args.target, slo)
    if args.json:
        print(json.dumps({"by": "capacity", "target": args.target, "slo": asdict(slo) if slo else None,
                          "groups": [asdict(c) for c in choices]}, indent=1))
    else:
        print(render_capacity(choices, slo))
    return 1 if any(c.batch_size is None for c in choices) else 0
