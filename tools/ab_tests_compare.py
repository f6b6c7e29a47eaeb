#!/usr/bin/env python
"""Which test should ``batchperf ab`` judge with? Both, simulated at the same alpha and budget (docs/ab.md).

For each test (``signed-rank`` at its per-look level, ``t`` at its O'Brien-Fleming-type boundaries) it
simulates sequences of pair log-ratios ``d = ln(B/A)`` and judges them as ``ab`` does (look after every pair,
stop at the first call), printing two Markdown tables:

- **false alarms** under the null (no change) for three laws of the pairs: normal, heavy-tailed t(2) and
  two-point outliers (N(0, 0.02) plus ±0.3 one time in ten), the laws ``tests/ab/test_stats.py`` uses: the share
  of sequences whose interval excludes 0 at some look (either side), and the share that end "no change";
- **power** against a 5% slowdown (d shifted by ln 0.95) at pair sd 0.05 / 0.07 / 0.10: the share called
  "regression" within the budget, and the median pairs to that call.

Intervals are the tests' own (``Judge.interval``) on every look of every sequence, so this is slow-ish
(about a minute per 1000 sequences and budget on one core); the defaults take a few minutes:

    PYTHONPATH=src python tools/ab_tests_compare.py                      # alpha 0.05, budgets 14 and 30
    PYTHONPATH=src python tools/ab_tests_compare.py --sims 400 --budgets 14  # a quick look
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys

import numpy as np

from batchperf.ab import judge as ab_judge
from batchperf.ab.stats import call
from batchperf.regress.verdict import Verdict

LAWS = ("normal", "t(2)", "two-point outliers")


def draws(law: str, rng: np.random.Generator, shape: tuple[int, int], sd: float = 0.07) -> np.ndarray:
    """Null pairs of ``law`` (normal and t(2) scaled to ``sd``; the outlier law as tests/ab/test_stats.py has it)."""
    if law == "normal":
        return rng.normal(0, sd, shape)
    if law == "t(2)":
        return sd * rng.standard_t(2, shape)
    return rng.normal(0, 0.02, shape) + rng.choice([-0.3, 0.3], shape) * (rng.random(shape) < 0.1)


def verdict(seq: np.ndarray, judge: ab_judge.Judge, margin: float) -> tuple[Verdict, int, bool]:
    """(the call ``ab`` makes on this sequence, pairs it took, whether some look's interval excluded 0)."""
    excluded = False
    for n in range(1, len(seq) + 1):
        if judge.needs is None or n < judge.needs:
            continue
        iv = judge.interval(seq[:n])
        excluded |= not iv.low <= 0 <= iv.high
        v = call(iv, higher_is_better=True, margin=margin)
        if v is not Verdict.INCONCLUSIVE:
            return v, n, excluded
    return Verdict.INCONCLUSIVE, len(seq), excluded


def simulate(judge: ab_judge.Judge, data: np.ndarray, margin: float) -> dict[str, float]:
    out = [verdict(row, judge, margin) for row in data]
    reg = [n for v, n, _ in out if v is Verdict.REGRESSION]
    return {"excluded": sum(e for _, _, e in out) / len(out), "regression": len(reg) / len(out),
            "no change": sum(v is Verdict.NO_CHANGE for v, _, _ in out) / len(out),
            "pairs": statistics.median(reg) if reg else math.nan}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--alpha", type=float, default=0.05, help="family error per metric and cell (default 0.05)")
    parser.add_argument("--budgets", default="14,30", help="max pairs to compare at (default 14,30)")
    parser.add_argument("--sims", type=int, default=2000, help="sequences per row (default 2000)")
    parser.add_argument("--margin", type=float, default=0.03, help="equivalence margin (default 0.03)")
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args()
    budgets = [int(b) for b in args.budgets.split(",")]
    slack = 3 * math.sqrt(args.alpha * (1 - args.alpha) / args.sims)
    print(f"false alarms under the null (alpha {args.alpha}, {args.sims} sequences a row, Monte Carlo "
          f"error ±{slack:.3f} at 3 sigma):\n")
    print("| law | max pairs | test | interval excludes 0 at some look | ends 'no change' |")
    print("|---|---:|---|---:|---:|")
    for law in LAWS:
        for m in budgets:
            data = draws(law, np.random.default_rng(args.seed), (args.sims, m))
            for test in ab_judge.TESTS:
                r = simulate(ab_judge.make(test, m, args.alpha), data, args.margin)
                print(f"| {law} | {m} | {test} | {r['excluded']:.3f} | {r['no change']:.3f} |", flush=True)
    print(f"\npower against a 5% slowdown (normal pairs, alpha {args.alpha}, {args.sims} sequences a row):\n")
    print("| pair sd | max pairs | test | caught (regression) | median pairs to the call |")
    print("|---:|---:|---|---:|---:|")
    for sd in (0.05, 0.07, 0.10):
        for m in budgets:
            data = math.log(0.95) + np.random.default_rng(args.seed + 1).normal(0, sd, (args.sims, m))
            for test in ab_judge.TESTS:
                r = simulate(ab_judge.make(test, m, args.alpha), data, args.margin)
                print(f"| {sd:.2f} | {m} | {test} | {r['regression']:.1%} | {r['pairs']:.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
