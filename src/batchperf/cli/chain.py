"""``batchperf chain``: releases in order, each adjacent pair judged by ``batchperf ab``, plus first -> last.

    batchperf chain --python .venv-vllm0271 --python .venv-vllm0280 --python .venv-vllm0290 \\
        --label 0.27.1 --label 0.28.0 --label 0.29.0 --out results/chain-vllm -- -m cpu -k vllm

Each ``--python`` (or ``--dir``) is one environment, in release order; ``--label`` names each (default: its
virtualenv's folder). Every step is one ``batchperf ab`` (same options, ``--alpha`` split over the chain's runs) in
OUT/step-NN-<from>-to-<to>/, first -> last in OUT/first-last-…/, and each run that called a change is measured again,
B first, in OUT/confirm-…/; OUT/chain.json and OUT/chain.md hold the summary. Run it again with the same arguments to
resume after an interruption. Exit codes (docs/upgrades.md), counting confirmed calls only: 0 no confirmed regression,
1 a confirmed regression, 2 an inconclusive step or a call not confirmed (and none failed), 3 usage error (nothing
ran), 4 a step or a confirmation failed (the chain went on), or any other error (one line says why, never 1), 130/143 interrupted by SIGINT/SIGTERM (resume it). Logic
in :mod:`batchperf.releases.chain`.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from batchperf.ab.env import Environment, EnvironmentProblem
from batchperf.ab.settings import Settings, UsageProblem
from batchperf.cli.ab import RUN_FAILED, USAGE_ERROR, add_verdict_args, usage_errors_exit_3, verdict_kwargs
from batchperf.cli.bisect import add_environment_args, environments
from batchperf.launch.child import exit_code_of
from batchperf.results.io import atomic_write_text

# A chain's runs judge with the sequential t unless told otherwise: at the chain's split alpha (0.05 / 6 runs for six
# releases) the signed-rank test cannot decide before 8 pairs (its smallest p at 7 is 2/2^7 = 0.016), the whole of
# the budget a chain gives a run, where the t can from its 5th (docs/upgrades.md, "What it costs")
TEST = "t"


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    usage_errors_exit_3(parser)
    add_environment_args(parser, "release order")
    parser.add_argument("--label", action="append", default=[], metavar="NAME",
                        help="each environment's name in the tables and the plot, in the same order, e.g. 0.27.1 "
                             "(repeatable; default: the virtualenv's folder name)")
    parser.add_argument("--out", type=Path, default=None, metavar="DIR",
                        help="folder for every step's ab run, chain.json and chain.md (default results/chain-<time>); "
                             "give the same one again to resume")
    add_verdict_args(parser, TEST, ", chain's own: at a six-release chain's split alpha signed-rank decides only at 8 "
                                   "pairs, the t from 5")


def default_labels(envs: list[Environment]) -> list[str]:
    """Each virtualenv's folder name (``.venv-vllm0271``); the positions where those do not tell them apart."""
    names = [(p.parent.parent.name if p.parent.name == "bin" else p.name) for p in (e.python for e in envs)]
    return names if len(set(names)) == len(names) else [str(i) for i in range(len(envs))]


def check_arguments(env: Environment, pytest_args: list[str]) -> None:
    """UsageProblem when pytest rejects the arguments after ``--`` (an unknown option, a malformed ``-m``), asked of
    the first environment before any step: every step would fail the same way. Any other problem of that
    environment is its steps' to report."""
    from batchperf.ab.env import ArgumentsRejected, collect

    try:
        collect(env, pytest_args)
    except ArgumentsRejected as exc:
        raise UsageProblem(str(exc)) from None
    except (EnvironmentProblem, OSError, subprocess.TimeoutExpired):
        pass


def main(args: argparse.Namespace) -> int:
    from batchperf.releases.chain import run_chain, usable
    from batchperf.releases.chain_report import Chain, render_chain_markdown

    out = args.out or Path("results") / f"chain-{time.strftime('%Y%m%d-%H%M%S')}"
    try:
        if max(len(args.python), len(args.dir)) < 2:
            raise UsageProblem("a chain needs at least two environments, in release order: repeat --python (or --dir)")
        envs = environments(args.python, args.dir, args.env)
        labels = args.label or default_labels(envs)
        base = Settings(envs[0], envs[-1], out=out, **verdict_kwargs(args))

        def ready(env: Environment) -> None:
            usable(env)
            if env is envs[-1]:  # once, after every environment passed (a checkout outside one fails pytest too)
                check_arguments(envs[0], args.pytest_args)

        result = run_chain(envs, labels, base, progress=lambda line: print(line, file=sys.stderr, flush=True),
                           check=ready)
    except (UsageProblem, EnvironmentProblem) as exc:
        print(f"batchperf chain: {exc}", file=sys.stderr)
        return USAGE_ERROR
    except KeyboardInterrupt as exc:  # in the checks before the first step (after it, run_chain says what ran)
        print("batchperf chain: interrupted before the first step; nothing was measured", file=sys.stderr)
        return exit_code_of(exc)
    except Exception as exc:  # noqa: BLE001 - one line, never a traceback, never exit 1 (a regression)
        print(f"batchperf chain: failed: {type(exc).__name__}: {exc} (the finished steps are in {out}, if any; run "
              "the same command again to resume)", file=sys.stderr)
        return RUN_FAILED
    table = render_chain_markdown(Chain.of(result))
    print(table)
    try:
        atomic_write_text(out / "chain.md", table + "\n")
    except OSError as exc:
        print(f"batchperf chain: chain.md could not be written ({exc}); chain.json holds the steps", file=sys.stderr)
    state = ("interrupted: run the same command again to resume" if result.status == "interrupted"
             else f"stopped, exit 3: {result.reason}" if result.status == "budget" else f"exit {result.exit_code}")
    print(f"batchperf chain: {state}; every step's ab run, chain.json and chain.md in {out}")
    return result.exit_code
