"""``batchperf capacity``: the highest offered load at which one cell's SLO attainment stays >= a target.

Each probe is a child ``pytest perf_tests`` of the one cell the matrix options select, at ``--batchperf-load X``,
into its own results file (:mod:`batchperf.capacity.probe`); the search (:mod:`batchperf.capacity.search`) reads the
attainment from it. The answer
is a results file like any other (:mod:`batchperf.capacity.record`): gate it with ``batchperf compare``, pin it with
``batchperf refresh``, draw it with ``batchperf report``.

``--from-probes DIR`` runs nothing: it writes the results file from the probes a search kept in DIR (an interrupted
search's, or one to fit again with other settings), as the search would have at its end.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from batchperf.capacity.search import ProbeResult, SearchSettings
from batchperf.cli.options import real
from batchperf.cli.run import add_cli_args as add_run_args

if TYPE_CHECKING:
    from batchperf.capacity.probe import Probes

NOT_CONVERGED = 3  # exit status when the budget or the load range ran out before the interval reached the resolution
USAGE = 2  # exit status of a usage error (argparse's): nothing ran


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    add_run_args(parser)  # --tier, --out (the capacity results file), --suite, the matrix options, -- pytest args
    parser.add_argument("--target", type=real(above=True), default=0.90,
                        help="attainment to hold, a ratio in (0, 1) (default 0.90: DistServe's 90%%)")
    parser.add_argument("--resolution", type=real(above=True), default=0.05,
                        help="stop when the capacity's interval (--confidence) is at most this share of it wide "
                             "(default 0.05)")
    parser.add_argument("--budget-min", type=real(above=True), default=30.0,
                        help="wall-clock minutes the search may take; no probe starts that would run past it "
                             "(default 30)")
    parser.add_argument("--start", type=real(above=True), default=1.0, help="first load factor probed (default 1)")
    parser.add_argument("--min-load", type=real(above=True), default=1 / 64,
                        help="below this load the cell has no capacity (default 1/64)")
    parser.add_argument("--max-load", type=real(above=True), default=64.0,
                        help="the search grows the load no further (default 64)")
    parser.add_argument("--confidence", type=real(), default=0.90,
                        help="of the capacity's interval, from the fit of attainment against load over every "
                             "probe's requests, in (0, 1) (default 0.90)")
    parser.add_argument("--probes-dir", type=Path, default=None,
                        help="where each probe's results file goes (default: next to --out, OUT-probes/)")
    parser.add_argument("--force", action="store_true",
                        help="replace an earlier search's --out and its probes' files (default: refuse them)")
    parser.add_argument("--from-probes", type=Path, default=None, metavar="DIR",
                        help="run nothing: write --out (default: DIR less its -probes, .json) from the probes a "
                             "search kept in DIR (an interrupted one's, or to fit again with --target, "
                             "--confidence, --resolution); the matrix options, --start and --budget-min are unused")


def settings_of(args: argparse.Namespace) -> SearchSettings:
    return SearchSettings(target=args.target, resolution=args.resolution, start=args.start, min_load=args.min_load,
                          max_load=args.max_load, confidence=args.confidence, budget_s=args.budget_min * 60)


def probes_of(args: argparse.Namespace, folder: Path) -> Probes:
    """How each probe runs: this command's ``batchperf run`` arguments, each probe's results file in ``folder``."""
    from batchperf.capacity.probe import Probes

    return Probes(args.suite, args.tier, dict(vars(args)), tuple(args.pytest_args), folder)


def usage_error(message: str) -> NoReturn:
    """Exit 2, as argparse does for an option it refuses, with the message on stderr: nothing has run."""
    print(f"batchperf capacity: error: {message}", file=sys.stderr)
    raise SystemExit(USAGE)


def _folder_problem(option: str, path: Path) -> str | None:
    """Why ``path`` cannot be a file or folder made under: an existing ancestor that is not a folder; or None."""
    for parent in [path, *path.parents] if option == "--probes-dir" else list(path.parents):
        if parent.exists():
            return None if parent.is_dir() else f"{option} {path}: {parent} is not a folder"
    return None


def earlier_search(out: Path, folder: Path) -> list[Path]:
    """What an earlier search left at ``out`` and in the probes ``folder`` that this one would replace."""
    left = [out] if out.exists() else []
    return left + (sorted(folder.glob("probe[0-9][0-9]*-load*.json")) if folder.is_dir() else [])


def check_out_file(out: Path) -> None:
    """Refuse an --out under a file, or one that is a folder."""
    if why := _folder_problem("--out", out):
        usage_error(f"{why}; give a path in a folder")
    if out.is_dir():
        usage_error(f"--out {out} is a folder; give a results file's path (e.g. {out / 'capacity.json'})")


def check_out(args: argparse.Namespace, out: Path, folder: Path) -> None:
    """Refuse, before anything runs, an --out or --probes-dir under a file, or one an earlier search wrote (the
    later result would silently replace the earlier one) unless --force, which removes them."""
    check_out_file(out)
    if why := _folder_problem("--probes-dir", folder):
        usage_error(f"{why}; give a path in a folder")
    if left := earlier_search(out, folder):
        if not args.force:
            usage_error(f"--out {out}: an earlier search's results are there ({', '.join(map(str, left[:3]))}"
                        f"{', ...' if len(left) > 3 else ''}); give another --out (or --probes-dir), or --force to "
                        f"replace them")
        for path in left:
            path.unlink()


def from_probes(args: argparse.Namespace) -> int:
    """``--from-probes DIR``: the capacity results file from a search's kept probes; nothing runs."""
    from batchperf.capacity.probe import capacity_from_probes
    from batchperf.results.record import ResultsError

    folder: Path = args.from_probes
    if not folder.is_dir():
        usage_error(f"--from-probes {folder}: no such folder; give the folder a search kept its probes in "
                    f"(OUT-probes/ beside its --out, or its --probes-dir)")
    try:
        settings = settings_of(args)
    except ValueError as exc:
        usage_error(str(exc))
    out = args.out or folder.with_name(f"{folder.name.removesuffix('-probes')}.json")
    check_out_file(out)
    if out.exists() and not args.force:
        usage_error(f"--out {out}: a results file is there; give another --out, or --force to replace it (the "
                    f"probes are kept either way)")
    try:
        capacity, record = capacity_from_probes(folder, settings, out)
    except ResultsError as exc:
        raise SystemExit(f"batchperf capacity: {exc}")
    print(f"batchperf capacity: {record.id}: {capacity.describe()}")
    print(f"batchperf capacity: results in {out} (from the {len(capacity.runs)} probes in {folder}/)")
    return 0 if capacity.converged else NOT_CONVERGED


def main(args: argparse.Namespace) -> int:
    from batchperf.capacity.probe import ProbeFailed, find_capacity
    from batchperf.launch.child import exit_code_of, stop_signals
    from batchperf.results.record import ResultsError

    if args.from_probes is not None:
        return from_probes(args)
    if not args.suite.is_dir():
        raise SystemExit(f"batchperf capacity: no performance suite at {args.suite}/; "
                         f"run from a batchperf checkout or pass --suite PATH")
    try:
        settings = settings_of(args)
    except ValueError as exc:
        usage_error(str(exc))
    out = args.out or Path("results") / f"capacity-{args.tier}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    probes = probes_of(args, args.probes_dir or out.parent / f"{out.stem}-probes")
    check_out(args, out, probes.folder)

    def heard(load: float, got: ProbeResult) -> None:
        print(f"batchperf capacity: load {load:g}: attainment {got.attainment:.1%} ({got.met}/{got.offered} met, "
              f"{got.request_rate:.3g} req/s offered)", flush=True)

    try:
        with stop_signals():  # Ctrl-C / SIGTERM: the running probe's pytest is stopped, then Stopped here
            capacity, record = find_capacity(probes, settings, out, heard)
    except (ProbeFailed, ResultsError) as exc:
        raise SystemExit(f"batchperf capacity: {exc}")
    except KeyboardInterrupt as exc:
        done = len(probes.files)
        print(f"batchperf capacity: interrupted ({exc}) during probe {done + 1}; the {done} finished probe(s) are "
              f"kept in {probes.folder}/ (their loads and attainments above); no capacity result was written to "
              f"{out}; write it from them with: batchperf capacity --from-probes {probes.folder} --out {out}",
              file=sys.stderr, flush=True)
        return exit_code_of(exc)
    print(f"batchperf capacity: {record.id}: {capacity.describe()}")
    print(f"batchperf capacity: results in {out} (probes in {probes.folder}/)")
    return 0 if capacity.converged else NOT_CONVERGED
