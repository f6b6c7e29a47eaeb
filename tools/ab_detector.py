#!/usr/bin/env python
"""How good is ``batchperf ab``'s verdict on this machine? A/A verdicts and verdicts with B slowed, per cell.

For each cell kind, ``--aa`` verdicts of this interpreter against itself (a "regression" there is a false
alarm) and ``--slowed`` verdicts with B's forward passes slowed by the documented injection
(``BATCHPERF_INJECT_SLOWDOWN``, see ``batchperf.backends.inject``: in-process models, and through its vLLM
plugin the model in vLLM's engine core, so the ``vllm`` and ``server`` kinds are slowed where vLLM computes).
Every verdict is a full ``batchperf ab`` run (``run_ab``: real pytest processes, interleaved A B / B A,
stopping as soon as the answer is clear, or at the budget). It prints one line per verdict and a table:
regression rate, median pairs used, median minutes, median interval width, and the issue's targets (A/A
"regression" <= 1/20 per cell; compute-bound 5% caught >= 18/20; dispatch-bound 10% caught >= 18/20; each
verdict within 10 minutes). Then, from the pairs measured, three more tables:

- an estimate: ab's own judging (``judge_metric`` with the test the verdicts ran, ``--test``: its per-look level
  or t boundaries, the minutes rule) replayed on
  verdicts drawn from the measured pairs (A/A ones with a random label swap: the null the design
  guarantees), and the chance that a set of 20 meets the target;
- what a verdict would need to meet it (pairs and minutes, a normal approximation from the pairs' spread);
- where the noise is: within a process (rounds) and between processes, which says whether more rounds or
  more pairs would help;
- wall-clock throughput against CPU time per output token on the same pairs: which is steadier, and what each
  sees of the injected slowdown.

The full study takes hours and needs a QUIET machine; ``--keep`` makes it resumable (run the same command
again: finished verdicts are kept), and ``--estimate-only`` prints the tables from what is there:

    OMP_NUM_THREADS=1 PYTHONPATH=src python tools/ab_detector.py --keep results/ab-detector
    OMP_NUM_THREADS=1 PYTHONPATH=src python tools/ab_detector.py --keep results/ab-detector --estimate-only
    OMP_NUM_THREADS=1 PYTHONPATH=src python tools/ab_detector.py --aa 2 --slowed 2 --cells dispatch \\
        --max-pairs 2 --alpha 0.6 --rounds 1 --extra "--batchperf-num-prompts 8"   # a smoke test (minutes)

vLLM's two cells (issue 36), resident pairs of 40 rounds (a vLLM process starts in about a minute, a round is
~0.5 s), A/A and a 5% slowdown in the engine core, six real verdicts a row:

    OMP_NUM_THREADS=1 PYTHONPATH=src python tools/ab_detector.py --cells vllm,server --design resident \\
        --rounds 40 --aa 6 --slowed 6 --keep results/ab-detector-vllm
"""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
from pathlib import Path

from batchperf.ab.settings import DESIGNS
from batchperf.ab.stats import DEFAULT_TEST, TESTS, recorded_test
from batchperf.calibrate.cells import DETECTOR_CELLS
from batchperf.calibrate.noise import noise, wall_and_cpu, without_results
from batchperf.calibrate.replay import estimate, needed
from batchperf.calibrate.scores import MINUTES_TARGET, measured, score, table
from batchperf.calibrate.study import Study, run_study
from batchperf.regress.verdict import Verdict


def parser() -> argparse.ArgumentParser:
    """The tool's options: how many verdicts of which cells, ab's settings for each, and what to print after."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--aa", type=int, default=20, help="A/A verdicts per cell (default 20)")
    parser.add_argument("--slowed", type=int, default=20, help="verdicts per cell with B slowed (default 20)")
    parser.add_argument("--cells", default="compute,dispatch",
                        help=f"cell kinds, of {', '.join(DETECTOR_CELLS)} (default both)")
    parser.add_argument("--slowdown", action="append", default=[], metavar="KIND=FRAC",
                        help="override a kind's injected slowdown, e.g. dispatch=0.2")
    parser.add_argument("--metrics", default="output_throughput", help="deciding metrics (default output_throughput)")
    parser.add_argument("--margin", type=float, default=0.03, help="equivalence margin (default 0.03)")
    parser.add_argument("--alpha", type=float, default=0.05, help="ab's false-alarm rate per verdict (default 0.05)")
    parser.add_argument("--max-pairs", type=int, default=14,
                        help="ab's budget of pairs per verdict (default 14: about what 10 minutes buy here)")
    parser.add_argument("--max-minutes", type=float, default=MINUTES_TARGET,
                        help=f"ab's budget of minutes per verdict (default {MINUTES_TARGET:g}, the target)")
    parser.add_argument("--rounds", type=rounds_arg, default=3,
                        help="measured rounds per process (default 3); 'auto': ab's own choice from its warm-up, "
                             "as `batchperf ab` without --rounds")
    parser.add_argument("--test", choices=TESTS, default=DEFAULT_TEST,
                        help=f"ab's test (default {DEFAULT_TEST}); the estimate replays the one the verdicts "
                             "ran with")
    parser.add_argument("--design", choices=DESIGNS, default="sequential",
                        help="ab's design (default sequential): 'resident' runs each pair's two processes at once, "
                             "in turns round by round")
    parser.add_argument("--extra", default="", metavar="ARGS",
                        help="more pytest arguments for every process, e.g. '--batchperf-num-prompts 8' (smoke runs)")
    parser.add_argument("--keep-servers", action="store_true",
                        help="ab --keep-servers: each side's vllm-server started once a verdict (docs/ab.md)")
    parser.add_argument("--keep", type=Path, default=None,
                        help="keep every verdict's folder here; run again with the same folder to resume (finished "
                             "verdicts are kept, an unfinished one is set aside and measured again)")
    parser.add_argument("--estimate", type=int, default=2000, metavar="N",
                        help="after the verdicts, replay ab's judging on N verdicts' worth of pairs resampled from "
                             "those measured (default 2000; 0: no estimate)")
    parser.add_argument("--estimate-test", action="append", default=[], choices=TESTS,
                        help="also replay the measured pairs with this test (repeatable): which test resolves "
                             "sooner on this machine's own pairs")
    parser.add_argument("--estimate-only", action="store_true",
                        help="measure nothing: print the table and the estimate from the verdicts in --keep")
    return parser


def rounds_arg(text: str) -> int | None:
    """``--rounds``: a count, or ``auto`` (None) for ab's own choice."""
    if text == "auto":
        return None
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give a number of rounds, or 'auto'") from None


def main(argv: list[str] | None = None) -> int:
    cli = parser()
    args = cli.parse_args(argv)
    kinds = tuple(k.strip() for k in args.cells.split(",") if k.strip())
    if unknown := [k for k in kinds if k not in DETECTOR_CELLS]:
        cli.error(f"unknown cell kind(s) {unknown}; known: {', '.join(DETECTOR_CELLS)}")
    if args.estimate_only and args.keep is None:
        cli.error("--estimate-only reads the verdicts in --keep DIR; give it")
    work = args.keep or Path(tempfile.mkdtemp(prefix="batchperf-ab-detector-"))
    work.mkdir(parents=True, exist_ok=True)
    metrics = tuple(m.strip() for m in args.metrics.split(",") if m.strip())
    if args.estimate_only:
        rows = {key: [score(doc, metrics[0]) for doc in docs] for key, docs in sorted(measured(work).items())}
    else:
        try:
            slowdowns = {k: float(v) for k, _, v in (s.partition("=") for s in args.slowdown)}
            study = Study(kinds, args.aa, args.slowed, slowdowns, tuple(shlex.split(args.extra)), metrics,
                          args.margin, args.alpha, args.max_pairs, args.max_minutes, args.rounds, args.test,
                          args.design, args.keep_servers)
            done = run_study(study, work, lambda line: print(line, flush=True))
        except ValueError as exc:  # StudyProblem too: a kept verdict measured with other settings
            cli.error(str(exc))
        if done.stopped:
            print(f"ab_detector: {done.stopped}", file=sys.stderr)
        rows = done.rows
    if not rows:
        print(f"ab_detector: no finished verdict in {work}", file=sys.stderr)
        return 1
    print()
    print(table(rows))
    first = next(iter(measured(work).values()))[0]["settings"]
    rounds = first["rounds"] or "ab's own choice of"
    print(f"\nsettings: alpha {first['alpha']}, margin ±{first['margin']:.0%}, deciding {', '.join(first['metrics'])}, "
          f"at most {first['max_pairs']} pairs / {first['max_minutes']:g} min per verdict, {rounds} rounds per "
          f"process ({recorded_test(first).describe()}); every verdict's files in {work}")
    if args.estimate:
        print(f"\nestimate: ab's judging replayed on {args.estimate} verdicts per row, each drawing pairs (with "
              "replacement) from that row's measured pairs, under the budget those verdicts ran with:\n")
        for test in [None, *args.estimate_test]:
            if test is not None:
                print(f"\nthe same estimate, judged with --test {test} instead (same pairs, budget and alpha):\n")
            print(estimate(work, metrics[0], args.estimate, test=test))
        print(f"\nwhat a verdict would need (alpha {first['alpha']}, 90% power, normal approximation from the "
              "measured pairs; see batchperf.calibrate.replay.needed):\n")
        print(needed(work, metrics[0], first["alpha"]))
        if lacking := without_results(work):
            print(f"\n{lacking} verdict(s) kept without their pairs' results files: left out of the two tables below")
        print("\nwhere the noise is (sd of ln(value); see batchperf.calibrate.noise):\n")
        print(noise(work, metrics[0]))
        print("\nwall-clock throughput against CPU time per output token, the same pairs (see "
              "batchperf.calibrate.noise.wall_and_cpu):\n")
        print(wall_and_cpu(work))
    return 0 if all(s.verdict != Verdict.FAILED.value for v in rows.values() for s in v) else 1


if __name__ == "__main__":
    sys.exit(main())
