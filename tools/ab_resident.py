#!/usr/bin/env python
"""The resident design's noise, measured (issue 25, part 2): two warm workers taking turns, A/A.

A **block** starts two pytest processes of the same cell (A and B: here the same environment, an A/A; B may be
slowed with ``--slow``), each held at the round gate (:mod:`batchperf.measure.round_gate`) before every round:
both set up and load in parallel, then their warm-ups run one after the other, then their measured rounds
alternate A B | B A | A B … (the first side swaps every block), and neither measures while the other does. Each
block is one pair of fresh processes, so a process's own level is still sampled once a block.

Per block it records each round's ln(output throughput); then it prints, over the blocks:

- the sd of a round pair's ln(B/A) within a block (round-to-round noise, drift between adjacent rounds
  cancelled), and the sd of a block's mean ln(B/A) between blocks (what a verdict's unit varies by);
- what a process's own level adds: the between-block sd beyond what the round pairs predict (sd/√rounds);
- a block's seconds, and the sd of the mean ln(B/A) that 10 minutes of blocks buy, beside the fresh-process
  design's figure from ``tools/ab_noise.py`` (``--compare DIR``).

    OMP_NUM_THREADS=1 PYTHONPATH=src python tools/ab_resident.py --blocks 10 --rounds 10 --keep results/ab-resident
    OMP_NUM_THREADS=1 PYTHONPATH=src python tools/ab_resident.py --keep results/ab-resident --estimate-only
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

from ab_detector import KINDS

from batchperf.ab.env import Environment, default_checkout, run_resident
from batchperf.measure.inject import ENV_SLOWDOWN as INJECT_ENV
from batchperf.results.io import read_results

METRIC = "output_throughput"
WAIT_S = 900.0


def run_block(index: int, kind: str, args: argparse.Namespace, work: Path) -> dict:
    """One block: a pair of resident workers (``batchperf ab --design resident``'s own
    :func:`~batchperf.ab.env.run_resident`). Returns each side's ln(throughput) per measured round."""
    envs = {side: Environment(side, Path(sys.executable),
                              ((INJECT_ENV, str(args.slow)),) if side == "B" and args.slow else (), default_checkout())
            for side in "AB"}
    stems = {side: work / f"{kind}-{index:03d}-{side}" for side in "AB"}
    first = "AB"[index % 2]
    began = time.monotonic()
    runs = run_resident(envs, [*KINDS[kind].selection, f"--batchperf-rounds={args.rounds}", "--batchperf-progress=off"],
                        stems, (first, "AB".replace(first, "")), [], WAIT_S)
    if bad := [r for r in runs.values() if r.crashed or any(o.status in ("failed", "error") for o in r.outcomes.values())]:
        raise RuntimeError(f"block {index}: {', '.join(f'{r.label} exit {r.returncode}' for r in bad)}; see "
                           + ", ".join(str(r.log) for r in bad))
    rounds = {}
    for side, run in runs.items():
        (record,) = read_results(run.results).records
        rounds[side] = [math.log(r[METRIC]) for r in record.rounds]
    block = {"index": index, "first": first, "seconds": time.monotonic() - began, **rounds}
    (work / f"{kind}-{index:03d}.block.json").write_text(json.dumps(block))
    return block


def blocks_of(work: Path, kind: str) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(work.glob(f"{kind}-[0-9][0-9][0-9].block.json"))]


def report(work: Path, kind: str, compare: float | None) -> None:
    blocks = blocks_of(work, kind)
    if len(blocks) < 3:
        print(f"{kind}: {len(blocks)} blocks, too few (3 or more)")
        return
    # round pair r: A's r-th measured round against B's r-th; a block's mean over its pairs
    diffs = [[b["B"][r] - b["A"][r] for r in range(min(len(b["A"]), len(b["B"])))] for b in blocks]
    means = [statistics.fmean(d) for d in diffs]
    within = math.sqrt(statistics.fmean(statistics.variance(d) for d in diffs))
    rounds = statistics.median(len(d) for d in diffs)
    between = statistics.stdev(means)
    level = math.sqrt(max(between ** 2 - within ** 2 / rounds, 0.0))
    seconds = statistics.median(b["seconds"] for b in blocks)
    per10 = 600 / seconds
    print(f"\n{KINDS[kind].name}: {len(blocks)} blocks x {rounds:g} round pairs, median {seconds:.1f} s a block")
    print(f"  mean ln(B/A) over blocks: {statistics.fmean(means):+.4f}  (each block: "
          + ", ".join(f"{m:+.3f}" for m in means) + ")")
    print(f"  sd of a round pair's ln(B/A), within a block: {within:.4f}")
    print(f"  sd of a block's mean ln(B/A), between blocks: {between:.4f}  (round pairs alone predict "
          f"{within / math.sqrt(rounds):.4f}; a process pair's own level adds sd {level:.4f})")
    print(f"  10 minutes buy {per10:.1f} blocks: sd of the mean ln(B/A) {between / math.sqrt(per10):.4f}"
          + (f"  (fresh-process pairs, tools/ab_noise.py: {compare:.4f})" if compare else ""))
    sides = {s: [statistics.fmean(b[s]) for b in blocks] for s in "AB"}
    print("  a side's mean ln(throughput) per block, A: " + ", ".join(f"{x:.3f}" for x in sides["A"]))
    print("                                          B: " + ", ".join(f"{x:.3f}" for x in sides["B"]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--blocks", type=int, default=10, help="pairs of resident workers (default 10)")
    parser.add_argument("--rounds", type=int, default=10, help="measured rounds a worker (default 10)")
    parser.add_argument("--cells", default="compute", help=f"cell kinds, of {', '.join(KINDS)}")
    parser.add_argument("--slow", type=float, default=0.0, help="slow B by this fraction (default 0: A/A)")
    parser.add_argument("--compare", type=float, default=None, help="the fresh-process design's sd in 10 minutes")
    parser.add_argument("--keep", type=Path, required=True, help="keep (and resume from) every block here")
    parser.add_argument("--estimate-only", action="store_true")
    args = parser.parse_args()
    kinds = [k for k in args.cells.split(",") if k]
    args.keep.mkdir(parents=True, exist_ok=True)
    if not args.estimate_only:
        began = time.monotonic()
        for i in range(args.blocks):
            for kind in kinds:
                if (args.keep / f"{kind}-{i:03d}.block.json").exists():
                    continue
                for stale in args.keep.glob(f"{kind}-{i:03d}-*"):
                    stale.unlink()
                b = run_block(i, kind, args, args.keep)
                print(f"[{kind} block {i + 1}/{args.blocks}] {b['seconds']:.1f} s, mean ln(B/A) "
                      f"{statistics.fmean(x - y for x, y in zip(b['B'], b['A'])):+.4f}  "
                      f"[{(time.monotonic() - began) / 60:.1f} min]", flush=True)
    for kind in kinds:
        report(args.keep, kind, args.compare)
    return 0


if __name__ == "__main__":
    sys.exit(main())
