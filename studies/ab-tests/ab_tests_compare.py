#!/usr/bin/env python
"""Which test should ``batchperf ab`` judge with? Both, simulated at the same alpha and budget (docs/ab.md).

For each test (``signed-rank`` at its per-look level, ``t`` at its O'Brien-Fleming-type boundaries) it
simulates sequences of pair log-ratios ``d = ln(B/A)`` and judges them as ``ab`` does (look after every pair,
stop at the first call), printing two Markdown tables:

- **false alarms** under the null (no change) for three laws of the pairs: normal, heavy-tailed t(2) and
  two-point outliers (N(0, 0.02) plus ±0.3 one time in ten), the laws ``tests/ab/test_stats_signed_rank.py`` uses: the share
  of sequences whose interval excludes 0 at some look (either side), and the share that end "no change";
- **power** against a 5% slowdown (d shifted by ln 0.95), normal pairs at sd 0.05 / 0.07 / 0.10 and the
  outlier law: the share called "regression" within the budget and by pair 10, the median pairs to that
  call, and the mean pairs spent until any call (an inconclusive sequence spends the whole budget).

Intervals are the tests' own (the judge's level or boundaries; the signed-rank one from the sorted Walsh
averages, which is what inverting the exact test gives), all sequences at once; the defaults take a minute:

    PYTHONPATH=src python studies/ab-tests/ab_tests_compare.py                      # alpha 0.05, budgets 14 and 30
    PYTHONPATH=src python studies/ab-tests/ab_tests_compare.py --sims 400 --budgets 14  # a quick look
"""

from __future__ import annotations

import argparse
import math
import sys

import numpy as np

from batchperf.ab.stats import SequentialTest, make_test, signed_rank, ttest

LAWS = ("normal", "t(2)", "two-point outliers")


def draws(law: str, rng: np.random.Generator, shape: tuple[int, int], sd: float = 0.07) -> np.ndarray:
    """Null pairs of ``law`` (normal and t(2) scaled to ``sd``; the outlier law as tests/ab/test_stats_signed_rank.py has it)."""
    if law == "normal":
        return rng.normal(0, sd, shape)
    if law == "t(2)":
        return sd * rng.standard_t(2, shape)
    return rng.normal(0, 0.02, shape) + rng.choice([-0.3, 0.3], shape) * (rng.random(shape) < 0.1)


def intervals(judge: SequentialTest, data: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Every sequence's interval (log scale) at look ``n``, as ``judge.interval`` gives it, all sequences at once.

    Signed-rank: with distinct Walsh averages the inverted test accepts exactly the shifts between the
    (c+1)-th smallest and the (c+1)-th largest, c the largest T+ whose p-value is at most the level
    (``tests/studies/test_ab_tests_compare.py`` checks both against ``SequentialTest.interval``); t: mean ± c_n s /
    sqrt(n).
    """
    head = data[:, :n]
    if judge.test == "t":
        crit = judge.crit[n - 1]
        if n < 2 or not math.isfinite(crit):
            return np.full(len(data), -np.inf), np.full(len(data), np.inf)
        half = crit * head.std(axis=1, ddof=1) / math.sqrt(n)
        return head.mean(axis=1) - half, head.mean(axis=1) + half
    table = signed_rank.pvalue_table(n)
    total = n * (n + 1) // 2
    lower = [t for t in range(total // 2 + 1) if table[t] <= judge.level]
    if not lower:
        return np.full(len(data), -np.inf), np.full(len(data), np.inf)
    c = lower[-1]
    i, j = np.triu_indices(n)
    walsh = np.sort((head[:, i] + head[:, j]) / 2, axis=1)
    return walsh[:, c], walsh[:, total - 1 - c]


def simulate(judge: SequentialTest, data: np.ndarray, margin: float) -> dict[str, float]:
    """``ab``'s calls on every sequence: looks after every pair, stops at the first call (``stats.call``)."""
    sims, max_pairs = data.shape
    open_ = np.ones(sims, dtype=bool)
    excluded = np.zeros(sims, dtype=bool)
    regression = np.zeros(sims, dtype=bool)
    no_change = np.zeros(sims, dtype=bool)
    pairs = np.full(sims, np.nan)
    spent = np.full(sims, float(max_pairs))  # pairs until any call (inconclusive: the whole budget)
    for n in range(1, max_pairs + 1):
        low, high = intervals(judge, data, n)
        low, high = np.expm1(low), np.expm1(high)
        excluded |= open_ & ((low > 0) | (high < 0))
        same = open_ & (low >= -margin) & (high <= margin)
        worse = open_ & ~same & (high < 0)
        better = open_ & ~same & (low > 0)
        no_change |= same
        regression |= worse
        pairs[worse] = n
        spent[same | worse | better] = n
        open_ &= ~(same | worse | better)
    caught = pairs[regression]
    return {"excluded": float(excluded.mean()), "regression": float(regression.mean()),
            "no change": float(no_change.mean()), "pairs": float(np.median(caught)) if len(caught) else math.nan,
            "by 10": float((regression & (pairs <= 10)).mean()), "spent": float(spent.mean())}


def judges(max_pairs: int, alpha: float) -> list[tuple[str, SequentialTest]]:
    """ab's two tests, and the t-test with Pocock-type spending (not offered by ab: shown for the choice)."""
    return [("t (O'Brien-Fleming)", make_test("t", max_pairs, alpha)),
            ("t (Pocock)", SequentialTest("t", crit=ttest.boundaries(max_pairs, alpha, "pocock"))),
            ("signed-rank", make_test("signed-rank", max_pairs, alpha))]


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
            for test, judge in judges(m, args.alpha):
                r = simulate(judge, data, args.margin)
                print(f"| {law} | {m} | {test} | {r['excluded']:.3f} | {r['no change']:.3f} |", flush=True)
    print(f"\npower against a 5% slowdown (alpha {args.alpha}, {args.sims} sequences a row):\n")
    print("| pairs | max pairs | test | caught (regression) | caught by pair 10 | median pairs to the catch "
          "| mean pairs spent (inconclusive: the budget) |")
    print("|---|---:|---|---:|---:|---:|---:|")
    laws = [(f"normal, sd {sd:.2f}", "normal", sd) for sd in (0.05, 0.07, 0.10)] + [
        ("two-point outliers", "two-point outliers", 0.0)]
    for name, law, sd in laws:
        for m in budgets:
            data = math.log(0.95) + draws(law, np.random.default_rng(args.seed + 1), (args.sims, m), sd)
            for test, judge in judges(m, args.alpha):
                r = simulate(judge, data, args.margin)
                print(f"| {name} | {m} | {test} | {r['regression']:.1%} | {r['by 10']:.1%} | {r['pairs']:.0f} "
                      f"| {r['spent']:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
