"""``batchperf ab``: the same cells in environments A and B, interleaved in fresh processes, with a verdict.

    batchperf ab --a .venv-vllm031/bin/python --b .venv-vllm032/bin/python -- -m cpu -k vllm
    batchperf ab --a .venv/bin/python --b .venv/bin/python --b-env BATCHPERF_INJECT_SLOWDOWN=0.05 \\
        -- -m cpu -k "hf-static and bs8 and p512 and c16"

Exit codes (docs/ab.md, "Exit codes"): 0 no regression, 1 regression (only ever a measured one), 2 inconclusive at
the budget, 3 usage error (checked before the first pair; nothing measured, nothing left), 4 a cell failed to run or
was not judged, an environment failed, or any other error (one line says why), 130/143 interrupted by SIGINT/SIGTERM
(the finished pairs are reported). Logic in :mod:`batchperf.ab.run`; docs/ab.md explains the statistics.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from batchperf.ab.env import Environment, EnvironmentProblem, default_checkout, interpreter, parse_vars
from batchperf.ab.settings import DEFAULT_ROUNDS, DESIGNS, RESTART_SERVERS_EVERY, Settings, UsageProblem
from batchperf.ab.stats import DEFAULT_TEST, TESTS
from batchperf.ab.stats.signed_rank import MAX_PAIRS
from batchperf.ab.warmup import MAX_ROUNDS, MIN_ROUNDS
from batchperf.envs.venv import unfinished
from batchperf.launch.child import exit_code_of
from batchperf.measure.catalogue import AB_DEFAULT, AB_WITH_LATENCY
from batchperf.results.io import atomic_write_text

if TYPE_CHECKING:
    from batchperf.ab.result import AbResult

USAGE_ERROR = 3
RUN_FAILED = 4


def usage_errors_exit_3(parser: argparse.ArgumentParser) -> None:
    """argparse exits 2 on bad arguments, which ab means as "inconclusive": make a usage error exit 3."""

    def error(message: str) -> NoReturn:
        parser.print_usage(sys.stderr)
        print(f"{parser.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(USAGE_ERROR)

    parser.error = error  # type: ignore[method-assign]


def add_verdict_args(parser: argparse.ArgumentParser, test: str = DEFAULT_TEST, test_why: str = "") -> None:
    """The options of a verdict (shared with ``batchperf bisect`` and ``chain``); ``test`` is ``--test``'s default,
    ``test_why`` a sentence of help saying why, where it is not ``ab``'s."""
    parser.add_argument("--margin", action="append", default=[], metavar="FRAC|METRIC=FRAC",
                        help="equivalence margin: an interval inside ±FRAC is 'no change' (default 0.03); "
                             "METRIC=FRAC for one metric (repeatable)")
    parser.add_argument("--metrics", default=None, metavar="LIST",
                        help=f"deciding metrics, judged statistically (default {','.join(AB_DEFAULT)}); the "
                             "exact KV metrics always decide; every other gated metric is reported")
    parser.add_argument("--latency-decides", action="store_true",
                        help=f"the older deciding set, {','.join(AB_WITH_LATENCY)} (alpha is split over them, so a "
                             "verdict needs more pairs); not with --metrics")
    parser.add_argument("--test", choices=TESTS, default=test,
                        help=f"the interval of each look (default {test}{test_why}): 'signed-rank', Wilcoxon at a "
                             "constant per-look level (no assumption beyond symmetric noise; the fewest pairs on "
                             "average, robust to outlier processes); 't', a sequential t-interval with "
                             "O'Brien-Fleming-type alpha spending (more power by the end of the budget when pairs are "
                             "near normal, later calls). docs/ab.md, 'Which test', says why")
    parser.add_argument("--alpha", type=float, default=0.05,
                        help="false-alarm rate of the whole run, over every cell and deciding metric, however "
                             "often it looks (default 0.05)")
    parser.add_argument("--max-pairs", type=int, default=30, metavar="N",
                        help=f"pairs of processes at most (default 30, at most {MAX_PAIRS}); a budget too small for "
                             "any verdict is refused, naming the fewest that can give one")
    parser.add_argument("--max-minutes", type=float, default=60.0, metavar="M",
                        help="stop before a pair that would end after M minutes (default 60); when they hold "
                             "fewer pairs than --max-pairs, the test's looks are planned for those (ab.md says so)")
    parser.add_argument("--process-minutes", type=float, default=None, metavar="M",
                        help="stop a process of A or B (with everything it started) that runs longer than M minutes, "
                             "and end the run as failed, exit 4 (default: --max-minutes)")
    parser.add_argument("--rounds", type=int, default=None, metavar="R",
                        help="measured rounds per process (a --batchperf-rounds in the pytest arguments wins); "
                             f"default: chosen from the warm-up's start-up and round seconds, rounds about as long as "
                             f"the start-up, {MIN_ROUNDS} to {MAX_ROUNDS} (with --no-warmup, pair 1 runs "
                             f"{DEFAULT_ROUNDS} and chooses for the rest); ab.md says what it chose and why")
    parser.add_argument("--no-warmup", dest="warmup", action="store_false",
                        help="no warm-up pair before pair 1 (default: one process of A and of B runs first and is "
                             "discarded, so a fresh environment's first process, compiling and filling caches, is "
                             "never judged)")
    parser.add_argument("--design", choices=DESIGNS, default="auto",
                        help="how a pair's two processes run (default auto: resident, or sequential where an "
                             "environment sees a GPU): 'sequential', A's process and then "
                             "B's, each alone on the machine; 'resident', both at once, each held before every round "
                             "and released in turns (A B | B A | ...), so the two sides' rounds lie seconds apart "
                             "instead of a process apart; 'duet', both measuring at the same time, each pinned to a core "
                             "of its own (swapped every pair). docs/ab.md, 'Designs', says which to use and why")
    parser.add_argument("--keep-servers", action="store_true",
                        help="start each environment's server (the vllm-server cells) once, in the warm-up, and keep "
                             "it across that environment's pairs instead of starting one in every process: a pair "
                             "then costs its pytest processes and rounds without two server starts (most of a "
                             "2-minute vllm-server pair on 2 cores); fresh ones are started every "
                             "--restart-servers-every pairs, so that a server's own level is sampled several times a "
                             "run. docs/ab.md, 'Servers kept across pairs'")
    parser.add_argument("--restart-servers-every", type=int, default=None, metavar="N",
                        help=f"with --keep-servers: retire both sides' kept servers every N pairs (between pairs, "
                             f"while nothing measures), so that the next pair's processes start fresh ones (default "
                             f"{RESTART_SERVERS_EVERY}; 1: fresh servers every pair; --max-pairs or more: once a run)")
    parser.add_argument("pytest_args", nargs="*", metavar="PYTEST_ARGS",
                        help="after --: the cells, as `pytest perf_tests` takes them (e.g. -m cpu -k vllm)")


def verdict_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """Settings keywords from :func:`add_verdict_args`' options; UsageProblem for a malformed one."""
    margin, margins = 0.03, {}
    for entry in args.margin:
        name, sep, value = entry.rpartition("=")
        try:
            number = float(value)
        except ValueError:
            raise UsageProblem(f"--margin {entry!r}: expected a fraction (0.03) or METRIC=FRACTION") from None
        if sep:
            margins[name.strip()] = number
        else:
            margin = number
    if args.latency_decides and args.metrics is not None:
        raise UsageProblem("--latency-decides and --metrics both name the deciding metrics; give one")
    chosen = args.metrics if args.metrics is not None else ",".join(
        AB_WITH_LATENCY if args.latency_decides else AB_DEFAULT)
    metrics = tuple(m.strip() for m in chosen.split(",") if m.strip())
    restarts = {}
    if args.restart_servers_every is not None:
        if not args.keep_servers:
            raise UsageProblem(f"--restart-servers-every {args.restart_servers_every}: restarts the servers that "
                               "--keep-servers keeps; give --keep-servers with it, or leave it out (without "
                               "--keep-servers every process starts its own server)")
        restarts = {"restart_servers_every": args.restart_servers_every}
    return {"margin": margin, "margins": margins, "metrics": metrics, "alpha": args.alpha,
            "max_pairs": args.max_pairs, "max_minutes": args.max_minutes, "rounds": args.rounds, "warmup": args.warmup,
            "test": args.test,
            "design": args.design, "keep_servers": args.keep_servers, **restarts,
            "process_minutes": args.process_minutes,
            "pytest_args": tuple(args.pytest_args), "command": shlex.join(["batchperf", *sys.argv[1:]])}


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    usage_errors_exit_3(parser)
    for side in ("a", "b"):
        up = side.upper()
        parser.add_argument(f"--{side}", required=True, type=Path, metavar=f"PYTHON_{up}",
                            help=f"environment {up}'s interpreter (or its virtualenv folder)")
        parser.add_argument(f"--{side}-env", action="append", default=[], metavar="K=V",
                            help=f"environment variable of {up}'s processes (repeatable)")
        parser.add_argument(f"--{side}-dir", type=Path, default=None, metavar="CHECKOUT",
                            help=f"batchperf checkout whose perf_tests and src/ {up} runs (default: this one)")
    parser.add_argument("--out", type=Path, default=None, metavar="DIR",
                        help="folder for every pair's results files, ab.json and ab.md (default results/ab-<time>)")
    parser.add_argument("--markdown", default=None, metavar="FILE",
                        help="also append the Markdown summary to FILE ('-': stdout), e.g. $GITHUB_STEP_SUMMARY")
    parser.add_argument("--confirm", action="store_true",
                        help="when the run calls a change, measure the pair again at once with the sides' order "
                             "reversed (B first) into OUT/confirmation/, and let a call stand only where that run "
                             "agrees; the exit code counts confirmed calls only (OUT/confirmed.json). Costs a second "
                             "run only when there is a call (docs/upgrades.md, 'Every call confirmed')")
    add_verdict_args(parser)


def environment(label: str, python: Path, env: list[str], folder: Path | None, env_option: str = "") -> Environment:
    """Environment ``label`` as the options give it; ``env_option`` names its ``env`` in a message (default
    ``--a-env`` for A)."""
    option = env_option or f"--{label.lower()}-env"
    if marker := unfinished(found := interpreter(python)):
        raise EnvironmentProblem(f"{found}: its virtualenv is an unfinished `batchperf env make` build ({marker.name} "
                                 "is there); run that `batchperf env make` again to finish it")
    return Environment(label, found, parse_vars(env, option), (folder or default_checkout()).resolve())


def check_markdown(target: str | None) -> None:
    """``--markdown FILE`` can be appended to (checked before the first pair, not after the whole run)."""
    if target is None or target == "-":
        return
    path = Path(target)
    if path.is_dir():
        raise UsageProblem(f"--markdown {target}: is a folder; give a file to append the summary to")
    if not path.parent.is_dir():
        raise UsageProblem(f"--markdown {target}: the folder {path.parent} does not exist; make it first")
    if not os.access(path if path.exists() else path.parent, os.W_OK):
        raise UsageProblem(f"--markdown {target}: cannot write there; give a file you can write")


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def main(args: argparse.Namespace) -> int:
    from batchperf.ab.run import run_ab

    out = args.out or Path("results") / f"ab-{time.strftime('%Y%m%d-%H%M%S')}"
    confirmed = None
    try:
        check_markdown(args.markdown)
        settings = Settings(environment("A", args.a, args.a_env, args.a_dir),
                            environment("B", args.b, args.b_env, args.b_dir), out=out, **verdict_kwargs(args))
        if args.confirm:
            from batchperf.releases.pair import run_confirmed

            confirmed = run_confirmed(settings, run_ab, progress=_progress)
            result = confirmed.first
        else:
            result = run_ab(settings, progress=_progress)
    except (UsageProblem, EnvironmentProblem) as exc:
        print(f"batchperf ab: {exc}", file=sys.stderr)
        return USAGE_ERROR
    except KeyboardInterrupt as exc:  # before the first pair (after it, run_ab reports what ran), or at the very end
        kept = (out / "ab.json").exists()
        print("batchperf ab: interrupted " + (f"at the end; the finished pairs are in {out / 'ab.json'}" if kept else
                                               "before the first pair; nothing was measured"), file=sys.stderr)
        return exit_code_of(exc)
    except Exception as exc:  # noqa: BLE001 - one line, never a traceback, never exit 1 (a regression)
        print(f"batchperf ab: failed: {type(exc).__name__}: {exc} (what was measured is in {out}, if anything)",
              file=sys.stderr)
        return RUN_FAILED
    if result.status == "failed":
        print(f"batchperf ab: the run failed: {result.reason}", file=sys.stderr)
    try:
        report(result, out, args.markdown)
        if confirmed is not None and confirmed.second is not None:
            report(confirmed.second, out / "confirmation", None)
    except OSError as exc:
        print(f"batchperf ab: the run ended ({result.status}, exit {result.exit_code} in {out / 'ab.json'}) but its "
              f"summary could not be written: {exc}", file=sys.stderr)
        return RUN_FAILED
    if confirmed is not None:
        from batchperf.releases.pair import summary_lines

        for line in summary_lines(confirmed):
            print(f"batchperf ab --confirm: {line}")
        print(f"batchperf ab: every pair's results files, logs, ab.json and ab.md in {out}, the confirmation's in "
              f"{out / 'confirmation'}, what stands in {out / 'confirmed.json'}")
        return confirmed.exit_code
    print(f"batchperf ab: every pair's results files, logs, ab.json and ab.md in {out}")
    return result.exit_code


def report(result: AbResult, out: Path, markdown_to: str | None) -> None:
    """The table on the terminal, ``OUT/ab.md`` (replaced atomically, never written through a link), ``--markdown``."""
    from batchperf.ab.report import render_ab_markdown, render_rich
    from batchperf.regress.compare import make_console

    render_rich(result, make_console())
    markdown = render_ab_markdown(result)
    atomic_write_text(out / "ab.md", markdown + "\n")
    if markdown_to == "-":
        print(markdown)
    elif markdown_to:
        with open(markdown_to, "a", encoding="utf-8") as fh:
            fh.write(markdown + "\n")
