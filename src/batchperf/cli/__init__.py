"""The ``batchperf`` command: one subcommand per job, each an ``add_cli_args`` + ``main`` pair.

Only the chosen subcommand's module is imported, and heavy libraries inside its ``main``, so
``batchperf --help`` is instant and a command that reads results never loads torch.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# subcommand -> (module, one-line help); each module has add_cli_args(parser) and main(args) -> int
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "run": ("batchperf.cli.run", "run the performance cells of a tier (pytest perf_tests) and save results JSON"),
    "kv": ("batchperf.cli.kv", "KV-cache bytes per token and per request from a model config"),
    "models": ("batchperf.cli.models", "list the registered models and backends"),
    "compare": ("batchperf.cli.compare", "per-cell changes of every metric between two results files, with the gate's verdicts"),
    "refresh": ("batchperf.cli.refresh", "pin a reviewed run as this hardware's baseline (baselines/<fingerprint>/)"),
    "report": ("batchperf.cli.report", "an HTML page of plots (throughput, latency, ITL, KV growth, memory) from results"),
    "recommend": ("batchperf.cli.recommend", "the batch size with the most throughput whose P99s meet your SLOs, or "
                  "the most capacity under the workload's SLOs"),
    "capacity": ("batchperf.cli.capacity", "the highest offered load at which one cell's SLO attainment stays >= a "
                 "target: a bisection of short runs, into a results file"),
    "merge": ("batchperf.cli.merge", "join per-shard results files (--batchperf-shard=I/N) into one results file"),
    "gpu-health": ("batchperf.cli.gpu_health", "record GPU health (other processes, clocks, persistence mode) as JSON"),
    "history": ("batchperf.cli.history", "change points per cell and metric over a folder of nightly results files"),
    "versus": ("batchperf.cli.versus", "two or more backends on the same cells, interleaved in one process: tok/s and ratios"),
    "export": ("batchperf.cli.export", "results as OpenMetrics text (--out FILE), or pushed to a Prometheus Pushgateway (--push URL)"),
    "ab": ("batchperf.cli.ab", "the same cells in two environments, interleaved in fresh processes: a statistical verdict"),
    "bisect": ("batchperf.cli.bisect", "the first bad environment of an ordered list (good first, bad last), by ab verdicts"),
    "chain": ("batchperf.cli.chain", "releases in order, each adjacent pair judged by ab, plus first -> last; "
              "resumable, with a release-over-release table (plot: batchperf report OUT)"),
    "env": ("batchperf.cli.env", "make a virtualenv for ab/bisect from a pip spec (env make --pip SPEC DIR), cached"),
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``batchperf`` parser; only ``command``'s module is imported (for its options), so a reader
    command never loads the measuring stack and ``--help`` stays instant."""
    parser = argparse.ArgumentParser(prog="batchperf", description="LLM inference batching performance suite")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module, help_text) in SUBCOMMANDS.items():
        sub_parser = sub.add_parser(name, help=help_text, description=help_text)
        if name == command:
            importlib.import_module(module).add_cli_args(sub_parser)
        sub_parser.set_defaults(_module=module)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command = next((a for a in argv if not a.startswith("-")), None)
    args = build_parser(command).parse_args(argv)
    return int(importlib.import_module(args._module).main(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
