"""``batchperf refresh``: pin a reviewed run as this hardware's baseline (see :mod:`batchperf.regress.refresh`)."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from batchperf.launch.child import exit_code_of, stop_signals
from batchperf.regress.compare import add_gate_args, make_console
from batchperf.regress.refresh import RefreshRefused, RefreshRequest, refresh, run_pytest
from batchperf.regress.store import DEFAULT_ROOT


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results", nargs="*", type=Path,
                        help="results JSON written by pytest --benchmark-json; several runs of the same cells are "
                             "pooled (their rounds together), so the baseline carries their run-to-run spread")
    parser.add_argument("--run", nargs=argparse.REMAINDER, metavar="PYTEST_ARGS",
                        help="run pytest with these arguments first and refresh from its results (put it last)")
    parser.add_argument("--repeat", type=int, default=1, metavar="N", help="with --run: run N times and pool them")
    parser.add_argument("--reason", default=None, help="why the baseline changes (recorded in the history)")
    parser.add_argument("--baselines", type=Path, default=DEFAULT_ROOT, help="baselines root (default: baselines)")
    parser.add_argument("--cells", action="append", default=[], metavar="GLOB",
                        help="only these cells (glob on cell id or test name; repeatable); others keep their entries")
    parser.add_argument("--accept-regression", action="store_true", help="store cells that regressed (needs --reason)")
    parser.add_argument("--allow-failed", action="store_true", help="leave failed cells out instead of refusing")
    parser.add_argument("--allow-dirty", action="store_true", help="accept results measured on a dirty git tree")
    parser.add_argument("--partial", action="store_true",
                        help="accept results missing some cells of the old baseline (they keep their old entries)")
    parser.add_argument("--dry-run", action="store_true", help="show the diff and the checks; write nothing")
    add_gate_args(parser, machine_moved=False)


def request_from(args: argparse.Namespace) -> RefreshRequest:
    """The refresh the parsed options ask for (``--run`` and ``--repeat`` stay here: they make the results)."""
    return RefreshRequest(
        baselines=args.baselines, reason=args.reason, cells=tuple(args.cells),
        accept_regression=args.accept_regression, allow_failed=args.allow_failed, allow_dirty=args.allow_dirty,
        partial=args.partial, dry_run=args.dry_run, k=args.batchperf_k, tolerances=tuple(args.batchperf_tolerance))


def main(args: argparse.Namespace) -> int:
    console = make_console()
    if args.accept_regression and not args.reason:  # RefreshRequest refuses it too; here in the options' names
        raise SystemExit("batchperf refresh: --accept-regression needs --reason \"why the regression is intended\"")
    if bool(args.results) == (args.run is not None):
        raise SystemExit("batchperf refresh: give results JSON file(s) or --run PYTEST_ARGS (one of the two)")
    if args.repeat < 1:
        raise SystemExit(f"batchperf refresh: --repeat must be >= 1, got {args.repeat}")
    try:
        request = request_from(args)
        if args.run is None:
            return refresh(request, args.results, console)
        with tempfile.TemporaryDirectory(prefix="batchperf-refresh-") as tmp:
            outs = []
            for i in range(args.repeat):
                out = Path(tmp) / f"results-{i}.json"
                try:
                    with stop_signals():  # SIGINT/SIGTERM: pytest's whole group stops first, then Stopped
                        rc = run_pytest(args.run, out)
                except KeyboardInterrupt as exc:
                    print(f"batchperf refresh: interrupted while pytest ran (run {i + 1} of {args.repeat}); its "
                          "processes were stopped and nothing was written", file=sys.stderr)
                    return exit_code_of(exc)
                if not out.exists():
                    raise SystemExit(f"batchperf refresh: pytest exited {rc} without writing results; "
                                     "nothing was written")
                if rc not in (0, 1) and not args.partial:  # 2: interrupted, 3+: internal/usage errors
                    raise SystemExit(f"batchperf refresh: pytest exited {rc} (interrupted or broken): the run is "
                                     "incomplete; nothing was written (--partial stores what it has)")
                outs.append(out)
            return refresh(request, outs, console)
    except (RefreshRefused, ValueError) as exc:
        raise SystemExit(f"batchperf refresh: {exc}") from None
