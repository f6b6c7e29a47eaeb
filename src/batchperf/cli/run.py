"""``batchperf run``: the performance cells of one tier, through pytest, into a results JSON."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pytest

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
    if not args.suite.is_dir():  # pytest's usage error (4), as every exit code of run is pytest's: 1 is a failed cell
        print(f"batchperf run: no performance suite at {args.suite}/; run from a batchperf checkout or pass "
              "--suite PATH", file=sys.stderr)
        return int(pytest.ExitCode.USAGE_ERROR)
    out = args.out or Path("results") / f"{args.tier}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    # A child pytest, not pytest.main(): this process has imported batchperf already, which pytest
    # would have to assertion-rewrite as a plugin. In the foreground: a Ctrl-C or SIGTERM still lets it
    # write its results file.
    cmd = tier_command(args.tier, vars(args), out, suite=args.suite, passthrough=args.pytest_args)
    before = _state(out)
    code = run_guarded(cmd, foreground=True).returncode
    if before is not None and _state(out) == before:  # an interrupted run that finished no cell writes nothing
        print(f"batchperf: {out} kept as it was: this run wrote no results (exit code {code})")
    elif out.exists():
        print(f"batchperf: results of the {args.tier} tier in {out}")
    return code


def _state(path: Path) -> tuple[int, int, int] | None:
    """What tells a file's content changed (inode, size, modification time in ns); None when it does not exist."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns
