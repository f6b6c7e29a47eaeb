"""``batchperf run``: the performance cells of one tier, through pytest, into a results JSON."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from batchperf.launch.child import run_guarded
from batchperf.launch.suite import tier_command
from batchperf.suite.plugin import add_matrix_options


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tier", default="cpu", choices=["cpu", "gpu"], help="which tier's cells (default: cpu)")
    parser.add_argument("--out", type=Path, default=None,
                        help="results JSON (default: results/<tier>-<time>.json)")
    parser.add_argument("--suite", type=Path, default=Path("perf_tests"),
                        help="folder of the performance suite (default: ./perf_tests of a batchperf checkout)")
    add_matrix_options(parser.add_argument)
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments, after --")


def main(args: argparse.Namespace) -> int:
    if not args.suite.is_dir():
        raise SystemExit(f"batchperf run: no performance suite at {args.suite}/; "
                         f"run from a batchperf checkout or pass --suite PATH")
    out = args.out or Path("results") / f"{args.tier}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    # A child pytest, not pytest.main(): this process has imported batchperf already, which pytest
    # would have to assertion-rewrite as a plugin. In the foreground: a Ctrl-C or SIGTERM still lets it
    # write its results file.
    cmd = tier_command(args.tier, vars(args), out, suite=args.suite, passthrough=args.pytest_args)
    code = run_guarded(cmd, foreground=True).returncode
    if out.exists():
        print(f"batchperf: results of the {args.tier} tier in {out}")
    return code
