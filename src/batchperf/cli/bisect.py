"""``batchperf bisect``: the first bad environment of an ordered list (good first, bad last), by ab verdicts.

    batchperf bisect --python .venv-vllm029 --python .venv-vllm030 --python .venv-vllm031 \\
        --python .venv-vllm032 -- -m cpu -k vllm
    batchperf bisect --python .venv/bin/python --dir ../wt-good --dir ../wt-mid --dir ../wt-bad -- -m cpu

Each ``--python`` (or ``--dir``) is one environment, in order; a single ``--python`` or ``--dir`` is
shared by all. Every step is one ``batchperf ab`` (same options) in OUT/step-NN-…; OUT/bisect.json holds
the steps. Exit codes: 0 the first bad one found, 2 only narrowed to a range (an inconclusive step, or
skipped environments in between), 3 usage error, 130 interrupted (143 by SIGTERM). Logic in :mod:`batchperf.releases.bisect`.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from batchperf.ab.env import Environment, EnvironmentProblem
from batchperf.ab.settings import Settings, UsageProblem
from batchperf.cli.ab import USAGE_ERROR, add_verdict_args, environment, usage_errors_exit_3, verdict_kwargs


def add_environment_args(parser: argparse.ArgumentParser, order: str) -> None:
    """``--python``/``--dir``/``--env``: an ordered list of environments (bisect's and chain's); ``order`` says
    which order, e.g. "good -> bad"."""
    parser.add_argument("--python", action="append", default=[], type=Path, metavar="PYTHON",
                        help=f"an environment's interpreter or virtualenv folder, in {order} (repeatable)")
    parser.add_argument("--dir", action="append", default=[], type=Path, metavar="CHECKOUT",
                        help="an environment's batchperf checkout, in the same order (repeatable; default: this one)")
    parser.add_argument("--env", action="append", default=[], metavar="K=V",
                        help="environment variable of every process (repeatable)")


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    usage_errors_exit_3(parser)
    add_environment_args(parser, "order good -> bad")
    parser.add_argument("--out", type=Path, default=None, metavar="DIR",
                        help="folder for every step's ab run and bisect.json (default results/bisect-<time>)")
    add_verdict_args(parser)


def environments(pythons: list[Path], dirs: list[Path], env: list[str]) -> list[Environment]:
    """One environment per --python/--dir; a single one of either is shared by every environment."""
    count = max(len(pythons), len(dirs))
    for name, given in (("--python", pythons), ("--dir", dirs)):
        if len(given) not in (0, 1, count):
            raise UsageProblem(f"{len(given)} {name} for {count} environments: give one per environment, or one for all")
    if count < 2:
        raise UsageProblem("bisect needs at least two environments (good first, bad last): repeat --python or --dir")
    pythons = pythons or [Path(sys.executable)]
    return [environment(str(i), pythons[i % len(pythons)] if len(pythons) > 1 else pythons[0], env,
                        (dirs[i] if len(dirs) > 1 else dirs[0]) if dirs else None, "--env") for i in range(count)]


def main(args: argparse.Namespace) -> int:
    from batchperf.releases.bisect import run_bisect

    out = args.out or Path("results") / f"bisect-{time.strftime('%Y%m%d-%H%M%S')}"
    try:
        envs = environments(args.python, args.dir, args.env)
        base = Settings(envs[0], envs[-1], out=out, **verdict_kwargs(args))
        result = run_bisect(envs, base, progress=lambda line: print(line, file=sys.stderr, flush=True))
    except (UsageProblem, EnvironmentProblem) as exc:
        print(f"batchperf bisect: {exc}", file=sys.stderr)
        return USAGE_ERROR
    for i, e in enumerate(result.envs):
        step = next((s for s in result.steps if s.index == i), None)
        mark = "good (given)" if i == 0 else "bad (given)" if i == len(result.envs) - 1 else "untested"
        print(f"#{i} {e.describe()}: {step.outcome if step else mark}"
              + (f" vs #{step.against}, {step.pairs} pair(s), {step.minutes:.1f} min" if step else ""))
    print(f"batchperf bisect: {result.summary()}; every step in {out}")
    return result.exit_code
