"""``batchperf capacity``: the highest offered load at which one cell's SLO attainment stays >= a target.

Each probe is a child ``pytest perf_tests`` of the one cell the matrix options select, at ``--batchperf-load X``,
into its own results file; the search (:mod:`batchperf.capacity.search`) reads the attainment from it. The answer
is a results file like any other (:mod:`batchperf.capacity.record`): gate it with ``batchperf compare``, pin it with
``batchperf refresh``, draw it with ``batchperf report``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from batchperf.capacity.search import ProbeResult, SearchSettings, search
from batchperf.cli.options import real
from batchperf.cli.run import add_cli_args as add_run_args
from batchperf.cli.run import pytest_argv, wait_for_child

NOT_CONVERGED = 3  # exit status when the budget or the load range ran out first


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    add_run_args(parser)  # --tier, --out (the capacity results file), --suite, the matrix options, -- pytest args
    parser.add_argument("--target", type=real(above=True), default=0.90,
                        help="attainment to hold, a ratio in (0, 1] (default 0.90: DistServe's 90%%)")
    parser.add_argument("--resolution", type=real(above=True), default=0.05,
                        help="stop when the bracket's width is at most this share of its low end (default 0.05: "
                             "the capacity is known to within 5%%)")
    parser.add_argument("--budget-min", type=real(above=True), default=30.0,
                        help="wall-clock minutes the search may take; no probe starts that would run past it "
                             "(default 30)")
    parser.add_argument("--start", type=real(above=True), default=1.0, help="first load factor probed (default 1)")
    parser.add_argument("--min-load", type=real(above=True), default=1 / 64,
                        help="below this load the cell has no capacity (default 1/64)")
    parser.add_argument("--max-load", type=real(above=True), default=64.0,
                        help="the search grows the load no further (default 64)")
    parser.add_argument("--confidence", type=real(), default=0.90,
                        help="a load is put on one side of the target only when this confidence interval (Wilson's, "
                             "on the requests met / offered pooled over every run at that load) excludes the target; "
                             "while it straddles the load is run again (default 0.90; 0: decide on one run)")
    parser.add_argument("--repeats", type=int, default=4,
                        help="runs at most at one load while its interval straddles the target; then the pooled "
                             "attainment decides (default 4)")
    parser.add_argument("--bisect-runs", type=int, default=2,
                        help="runs at least at each load of the bisection, near the edge, so that runs which disagree "
                             "are seen and widen the interval (default 2; 1: only while the interval straddles)")
    parser.add_argument("--probes-dir", type=Path, default=None,
                        help="where each probe's results file goes (default: next to --out, OUT-probes/)")


def settings_of(args: argparse.Namespace) -> SearchSettings:
    return SearchSettings(target=args.target, resolution=args.resolution, start=args.start, min_load=args.min_load,
                          max_load=args.max_load, confidence=args.confidence, repeats=args.repeats,
                          bisect_runs=args.bisect_runs,
                          budget_s=args.budget_min * 60)


def probe_argv(args: argparse.Namespace, load: float, out: Path) -> list[str]:
    """The child pytest of one probe: the run's arguments, its load replacing any the user gave."""
    base = argparse.Namespace(**{k: v for k, v in vars(args).items() if k != "batchperf_load"})
    return [sys.executable, "-m", "pytest", *pytest_argv(base, out), f"--batchperf-load={load:g}"]


def main(args: argparse.Namespace) -> int:
    from batchperf.capacity.record import probe_record, probe_result, write_capacity
    from batchperf.results.io import read_results
    from batchperf.results.record import ResultsError

    if not args.suite.is_dir():
        raise SystemExit(f"batchperf capacity: no performance suite at {args.suite}/; "
                         f"run from a batchperf checkout or pass --suite PATH")
    try:
        settings = settings_of(args)
    except ValueError as exc:
        raise SystemExit(f"batchperf capacity: {exc}")
    out = args.out or Path("results") / f"capacity-{args.tier}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    probes = args.probes_dir or out.parent / f"{out.stem}-probes"
    probes.mkdir(parents=True, exist_ok=True)
    files: list[tuple[float, Path]] = []

    def probe(load: float) -> ProbeResult:
        path = probes / f"probe{len(files) + 1:02d}-load{load:g}.json"
        code = wait_for_child(probe_argv(args, load, path))
        if not path.exists():
            raise SystemExit(f"batchperf capacity: the probe at load {load:g} wrote no results (pytest exit {code}); "
                             f"run it alone to see why: {' '.join(probe_argv(args, load, path))}")
        files.append((load, path))
        got = probe_result(probe_record(read_results(path, "probe results")))
        print(f"batchperf capacity: load {load:g}: attainment {got.attainment:.1%} ({got.met}/{got.offered} met, "
              f"{got.request_rate:.3g} req/s offered)", flush=True)
        return got

    try:
        capacity = search(probe, settings)
        at = [p for load, p in files if load == capacity.max_load] or [files[-1][1]]
        record = write_capacity(out, at[-1], capacity)
    except ResultsError as exc:
        raise SystemExit(f"batchperf capacity: {exc}")
    print(f"batchperf capacity: {record.id}: {capacity.describe()}")
    print(f"batchperf capacity: results in {out} (probes in {probes}/)")
    return 0 if capacity.converged else NOT_CONVERGED
