"""Replay recorded chain runs with either test: where would each have stopped, and with what call? (issue 56)

Every run folder under the given chain folders (``*/ab.json``: steps, first -> last, confirmations, second runs) is
judged again look by look on its own measured pairs (the round-paired throughput ratios its verdict used), with
the signed-rank test and with the sequential t, each made by ab's own ``make_test`` for the run's alpha and budget
(or, with ``--split R --budget N``, at the whole ``--alpha`` / R on a budget of N, as a chain of R runs judges now).
A look before a test's first possible verdict is not judged; a run whose recorded pairs end before a test decides
is "inconclusive (recorded pairs ran out)", which only the older runs (stopped by their own verdict at 6) can be.

    PYTHONPATH=src python studies/chain-aa/replay_test.py docs/data/chain-vllm-engine-confirmed \\
        studies/chain-aa/data-vllm --json studies/chain-aa/replay-t.json

Since no test looks past its stopping pair, a prefix of the recorded pairs is exactly what a run of the other test
would have measured up to its stop, machine and all: the replay needs no model of the noise.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from batchperf.ab.stats import TESTS, SequentialTest, make_test
from batchperf.ab.stats.signed_rank import call

METRIC = "output_throughput"


def ratios_of(ab: dict[str, Any]) -> tuple[list[float], str, float]:
    """(the deciding throughput's per-pair ratios as judged, its recorded call, its margin)."""
    cell = ab["cells"][0]
    metric = next(m for m in cell["metrics"] if m["metric"] == METRIC)
    return list(metric.get("paired_ratios") or metric["ratios"]), metric["call"], float(metric["margin"])


def replay(ratios: list[float], test: SequentialTest, margin: float, higher: bool = True) -> dict[str, Any]:
    """The first look at which ``test`` decides on these pairs, its call and interval (B/A - 1)."""
    first = test.needs or len(ratios) + 1
    interval = None
    for n in range(first, len(ratios) + 1):
        interval = test.interval([math.log(r) for r in ratios[:n]])
        verdict = call(interval, higher, margin).value
        if verdict != "inconclusive":
            break
    else:
        n, verdict = len(ratios), "inconclusive"
    return {"call": verdict, "pairs": n,
            "interval": None if interval is None else [round(math.expm1(interval.low), 4),
                                                       round(math.expm1(interval.high), 4)]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("chains", nargs="+", type=Path, help="chain folders (each run a folder with ab.json)")
    parser.add_argument("--split", type=int, default=None, metavar="R",
                        help="judge every run at --alpha / R (a chain of R runs) instead of its recorded alpha")
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--budget", type=int, default=8, metavar="N", help="with --split: the budget of pairs")
    parser.add_argument("--json", type=Path, default=None, help="write the rows here")
    args = parser.parse_args()
    made: dict[tuple[str, int, float], SequentialTest] = {}
    rows = []
    for path in sorted(p for chain in args.chains for p in chain.glob("*/ab.json")):
        ab = json.loads(path.read_text())
        ratios, recorded, margin = ratios_of(ab)
        alpha, budget = ((args.alpha / args.split, args.budget) if args.split
                         else (ab["settings"]["alpha"], ab["settings"]["max_pairs"]))
        row: dict[str, Any] = {"run": f"{path.parent.parent.name}/{path.parent.name}", "pairs": len(ratios),
                               "recorded": recorded, "recorded_test": ab["settings"].get("test", "signed-rank"),
                               "alpha": alpha, "budget": budget}
        for test in TESTS:
            key = (test, budget, alpha)
            made.setdefault(key, make_test(test, budget, alpha))
            row[test] = replay(ratios, made[key], margin)
        rows.append(row)
        print(f"{row['run'][:60]:60} {len(ratios):2} recorded {recorded:12} " + " | ".join(
            f"{t}: {row[t]['call']} at {row[t]['pairs']}" for t in TESTS))
    spent = {t: sum(r[t]["pairs"] for r in rows) for t in TESTS}
    differ = [r["run"] for r in rows if r["signed-rank"]["call"] != r["t"]["call"]]
    print(f"{len(rows)} runs; pairs to their stops: " + ", ".join(f"{t} {n}" for t, n in spent.items())
          + f"; calls that differ: {len(differ)} ({', '.join(differ) or 'none'})")
    if args.json:
        args.json.write_text(json.dumps({"split": args.split, "alpha": args.alpha, "budget": args.budget,
                                         "pairs": spent, "differ": differ, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
