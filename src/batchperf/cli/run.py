"""``batchperf run``: the performance cells of one tier, through pytest, into a results JSON."""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import time
from pathlib import Path

from batchperf.suite.plugin import add_matrix_options


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tier", default="cpu", choices=["cpu", "gpu"], help="which tier's cells (default: cpu)")
    parser.add_argument("--out", type=Path, default=None,
                        help="results JSON (default: results/<tier>-<time>.json)")
    parser.add_argument("--suite", type=Path, default=Path("perf_tests"),
                        help="folder of the performance suite (default: ./perf_tests of a batchperf checkout)")
    add_matrix_options(parser.add_argument)
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments, after --")


def pytest_argv(args: argparse.Namespace, out: Path) -> list[str]:
    argv = [str(args.suite), "-m", args.tier, f"--benchmark-json={out}", "-p", "no:cacheprovider"]
    for key, value in vars(args).items():
        if key.startswith("batchperf_") and value is not None:
            argv.append(f"--{key.replace('_', '-')}={value}")
    return argv + list(args.pytest_args)


def main(args: argparse.Namespace) -> int:
    if not args.suite.is_dir():
        raise SystemExit(f"batchperf run: no performance suite at {args.suite}/; "
                         f"run from a batchperf checkout or pass --suite PATH")
    out = args.out or Path("results") / f"{args.tier}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    # A child pytest, not pytest.main(): this process has imported batchperf already, which pytest
    # would have to assertion-rewrite as a plugin.
    code = wait_for_child([sys.executable, "-m", "pytest", *pytest_argv(args, out)])
    if out.exists():
        print(f"batchperf: results of the {args.tier} tier in {out}")
    return int(code)


def wait_for_child(argv: list[str]) -> int:
    """Run ``argv`` to its end, even when this process is interrupted, so the child writes its results.

    subprocess.call() kills its child 0.25 s after a Ctrl-C, cutting the results file. Here a SIGTERM
    is passed on to the child, and a Ctrl-C is left to it (the terminal sends it to the child too;
    a second one would interrupt pytest while it is saving); either way this waits for it to finish.
    """
    child = subprocess.Popen(argv)

    def pass_on(signum: int, frame: object) -> None:
        if signum == signal.SIGTERM and child.poll() is None:
            child.send_signal(signum)

    previous = {sig: signal.signal(sig, pass_on) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        return child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
