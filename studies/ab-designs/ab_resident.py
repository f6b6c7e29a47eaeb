#!/usr/bin/env python
"""The designs of ``batchperf ab`` side by side on their noise and their seconds (issue 25, part 2).

For each design (``--designs``, default all three, interleaved block by block so the machine's drift hits
each alike) it measures ``--blocks`` pairs of processes of one cell, A against B (the same environment: an A/A;
``--slow F`` slows B), ``--rounds`` measured rounds a process, exactly as ``batchperf ab --design D`` runs a pair:

- ``sequential``: A's process, then B's (the order swaps every block), each alone on the machine;
- ``resident``: both at once, each held at the round gate (:mod:`batchperf.launch.round_gate`) before every
  round and released in turns (A B | B A | …): the two sides' rounds lie seconds apart;
- ``duet``: both at once, each pinned to a core of its own (swapped every block), measuring at the same time.

It prints per design: the sd of a round pair's ln(B/A) (A's r-th round against B's r-th), the sd of a block's
mean ln(B/A) between blocks beside what the round pairs alone predict (sd/√rounds: the rest is a process pair's
own level, which only more blocks average out), a block's seconds, and the sd of the mean ln(B/A) that 10
minutes of blocks buy: the figure that decides how fast ``ab`` resolves (lower is better).

    OMP_NUM_THREADS=1 PYTHONPATH=src python studies/ab-designs/ab_resident.py --blocks 10 --keep results/ab-designs
    PYTHONPATH=src python studies/ab-designs/ab_resident.py --keep results/ab-designs --estimate-only
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

from batchperf.ab.designs import run_cells, run_resident
from batchperf.ab.env import Environment, default_checkout
from batchperf.ab.settings import DESIGNS
from batchperf.calibrate.cells import DETECTOR_CELLS  # the detector's cells: the same selection, one definition
from batchperf.launch.child import Stopped, stop_signals
from batchperf.launch.environ import INJECT_SLOWDOWN_ENV
from batchperf.results.io import read_results

METRIC = "output_throughput"
WAIT_S = 900.0


def run_block(index: int, kind: str, design: str, args: argparse.Namespace, work: Path) -> dict:
    """One block of ``design``: a pair of processes as ``batchperf ab --design DESIGN`` runs it (sequential:
    :func:`~batchperf.ab.designs.run_cells` twice; resident and duet: :func:`~batchperf.ab.designs.run_resident`). Returns
    each side's ln(throughput) per measured round."""
    slowed = ((INJECT_SLOWDOWN_ENV, str(args.slow)),) if args.slow else ()
    envs = {side: Environment(side, Path(sys.executable), slowed if side == "B" else (), default_checkout())
            for side in "AB"}
    name = f"{kind}-{design}-{index:03d}"
    stems = {side: work / f"{name}-{side}" for side in "AB"}
    first = "AB"[index % 2]
    order = (first, "AB".replace(first, ""))
    pytest_args = [*DETECTOR_CELLS[kind].selection, f"--batchperf-rounds={args.rounds}", "--batchperf-progress=off"]
    began = time.monotonic()
    if design == "sequential":
        runs = {side: run_cells(envs[side], pytest_args, stems[side], timeout_s=WAIT_S) for side in order}
    else:
        runs = run_resident(envs, pytest_args, stems, order, [], WAIT_S, duet=design == "duet")
    if bad := [r for r in runs.values() if r.crashed or any(o.status in ("failed", "error") for o in r.outcomes.values())]:
        raise RuntimeError(f"{name}: {', '.join(f'{r.label} exit {r.returncode}' for r in bad)}; see "
                           + ", ".join(str(r.log) for r in bad))
    rounds = {}
    for side, run in runs.items():
        (record,) = read_results(run.results).records
        rounds[side] = [math.log(r[METRIC]) for r in record.rounds]
    block = {"index": index, "design": design, "first": first, "seconds": time.monotonic() - began, **rounds}
    (work / f"{name}.block.json").write_text(json.dumps(block))
    return block


def blocks_of(work: Path, kind: str, design: str) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(work.glob(f"{kind}-{design}-[0-9][0-9][0-9].block.json"))]


def report(work: Path, kind: str, design: str) -> str:
    """One row of the table: the design's noise at both levels and what 10 minutes of its blocks buy."""
    blocks = blocks_of(work, kind, design)
    if len(blocks) < 3:
        return f"| {DETECTOR_CELLS[kind].name} | {design} | {len(blocks)} blocks: too few (3 or more) | | | | | | | |"
    # round pair r: A's r-th measured round against B's r-th; a block's mean over its pairs
    diffs = [[b["B"][r] - b["A"][r] for r in range(min(len(b["A"]), len(b["B"])))] for b in blocks]
    means = [statistics.fmean(d) for d in diffs]
    within = math.sqrt(statistics.fmean(statistics.variance(d) for d in diffs))
    rounds = statistics.median(len(d) for d in diffs)
    between = statistics.stdev(means)
    level = math.sqrt(max(between ** 2 - within ** 2 / rounds, 0.0))
    seconds = statistics.median(b["seconds"] for b in blocks)
    per10 = 600 / seconds
    # the side that goes first (sequential, resident) or holds the first core (duet) swaps every block: half the
    # difference between the two kinds of block is what going first (or the first core) is worth
    by_first = {side: [m for m, b in zip(means, blocks) if b["first"] == side] for side in "AB"}
    first = (f"{(statistics.fmean(by_first['B']) - statistics.fmean(by_first['A'])) / 2:+.4f}"
             if all(by_first.values()) else "—")
    return (f"| {DETECTOR_CELLS[kind].name} | {design} | {len(blocks)} x {rounds:g} | {seconds:.1f} | "
            f"{statistics.fmean(means):+.4f} | {first} | {within:.4f} | {between:.4f} "
            f"({within / math.sqrt(rounds):.4f}) | {level:.4f} | {per10:.1f}: **{between / math.sqrt(per10):.4f}** |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--blocks", type=int, default=10, help="pairs of processes per design (default 10)")
    parser.add_argument("--rounds", type=int, default=8, help="measured rounds a process (default 8)")
    parser.add_argument("--cells", default="compute", help=f"cell kinds, of {', '.join(DETECTOR_CELLS)}")
    parser.add_argument("--designs", default="sequential,resident,duet",
                        help=f"designs, interleaved block by block, of {', '.join(DESIGNS)} (default all)")
    parser.add_argument("--slow", type=float, default=0.0, help="slow B by this fraction (default 0: A/A)")
    parser.add_argument("--keep", type=Path, required=True, help="keep (and resume from) every block here")
    parser.add_argument("--estimate-only", action="store_true", help="measure nothing: the table from --keep")
    args = parser.parse_args()
    kinds = [k for k in args.cells.split(",") if k]
    designs = [d for d in args.designs.split(",") if d]
    if bad := [k for k in kinds if k not in DETECTOR_CELLS] + [d for d in designs if d not in DESIGNS]:
        parser.error(f"unknown cell kind(s) or design(s) {bad}; kinds: {', '.join(DETECTOR_CELLS)}; designs: "
                     f"{', '.join(DESIGNS)}")
    args.keep.mkdir(parents=True, exist_ok=True)
    code = 0
    if not args.estimate_only:
        began = time.monotonic()
        try:
            with stop_signals():
                for i in range(args.blocks):
                    for kind in kinds:
                        for design in designs:
                            if (args.keep / f"{kind}-{design}-{i:03d}.block.json").exists():
                                continue
                            for stale in args.keep.glob(f"{kind}-{design}-{i:03d}-*"):
                                stale.unlink()
                            b = run_block(i, kind, design, args, args.keep)
                            print(f"[{kind} {design} block {i + 1}/{args.blocks}] {b['seconds']:.1f} s, mean ln(B/A) "
                                  f"{statistics.fmean(x - y for x, y in zip(b['B'], b['A'])):+.4f}  "
                                  f"[{(time.monotonic() - began) / 60:.1f} min]", flush=True)
        except Stopped as exc:
            print(f"ab_resident: interrupted; the finished blocks are kept in {args.keep}", file=sys.stderr)
            code = exc.exit_code
    print("\n| cell | design | blocks x round pairs | s a block | mean ln(B/A) | going first (duet: the first core) "
          "is worth, ln | sd of a round pair's ln(B/A) "
          "| sd of a block's mean (round pairs alone predict) | a process pair's own level, sd "
          "| blocks in 10 min: sd of the mean ln(B/A) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for kind in kinds:
        for design in designs:
            print(report(args.keep, kind, design))
    return code


if __name__ == "__main__":
    sys.exit(main())
