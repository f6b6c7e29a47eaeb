"""Where a resident pair's noise comes from, and what pairing its rounds buys (issue 58's rounds and design levers).

``ab`` judges each pair's ln(B/A) round-paired since 2026-12-07 (docs/ab.md, "Round-paired pairs"): the median of
ln(B_i / A_i) over the two processes' i-th rounds, which ran back to back. Before, it was the ratio of the two
processes' medians. For each kept verdict of a detector row this prints:

- **the split**: a round's sd within its process; the pair sd of ln(B/A) as the ratio of medians; the part of it the
  rounds alone explain (each side's rounds resampled with replacement, 2,000 times, the ratio of medians recomputed);
  a process's own level, sd (what the pairs' spread leaves over the rounds' part, per side; "none seen" where the
  rounds alone explain the spread or more); and the pair sd round-paired;
- **the replay** (``--replay N``): N verdicts per row replayed with ``ab``'s own judging
  (:func:`batchperf.calibrate.replay.replay`: the row's test, looks and minutes; pairs drawn with replacement; an A/A
  pair's labels swapped at random), once on each pair's ratio of medians and once round-paired. ``--first-rounds R``
  replays each process as if it had run its first R rounds only, a pair's seconds shortened by the rounds left out
  (``ab.json``'s measured round seconds, both sides' in the resident design): the rounds lever, from measured rounds.

A data folder is a detector ``--keep`` folder's verdicts (``KIND-SLOWDOWN-NN/ab.json``) and ``rounds.json``, each
pair's rounds' output throughput (a few KB a verdict), which ``--collect KEEP`` writes from the kept pairs' results
files (they are not committed: megabytes):

    PYTHONPATH=src python studies/ab-detector/noise_split.py studies/ab-detector/data/vllm-engine-looks --replay 2000
    PYTHONPATH=src python studies/ab-detector/noise_split.py studies/ab-detector/data/vllm-engine-looks \\
        --replay 2000 --first-rounds 20
    PYTHONPATH=src python studies/ab-detector/noise_split.py studies/ab-detector/data/vllm-engine-looks \\
        --collect results/ab-detector-vllm-looks        # (re)writes its rounds.json, then the tables
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
from pathlib import Path
from typing import Any

from batchperf.ab.cell import round_paired

METRIC = "output_throughput"
RESAMPLES = 2000
Pairs = list[dict[str, list[float]]]  # each pair's rounds: {"A": [...], "B": [...]}


def pair_rounds(path: Path) -> list[float]:
    """The measured rounds' output throughput of the one cell in a pair's results file."""
    (bench,) = json.loads(path.read_text())["benchmarks"]
    return [float(r[METRIC]) for r in bench["extra_info"]["rounds"]]


def collect(keep: Path) -> dict[str, Pairs]:
    """verdict folder name -> its pairs' rounds, read from a kept study's pairs' results files."""
    verdicts: dict[str, Pairs] = {}
    for verdict in sorted(p for p in keep.iterdir() if p.is_dir()):
        pairs = []
        for a in sorted(verdict.glob("pair-*-A.json")):
            b = a.with_name(a.name.replace("-A.json", "-B.json"))
            if b.exists():
                pairs.append({"A": pair_rounds(a), "B": pair_rounds(b)})
        if pairs:
            verdicts[verdict.name] = pairs
    return verdicts


def ln_ratio(a: list[float], b: list[float]) -> float:
    return math.log(statistics.median(b) / statistics.median(a))


def rounds_var(a: list[float], b: list[float], rng: random.Random) -> float:
    """The variance of ln(median B / median A) over the pair's rounds resampled within each side."""
    return statistics.variance(ln_ratio(rng.choices(a, k=len(a)), rng.choices(b, k=len(b)))
                               for _ in range(RESAMPLES))


def split_row(name: str, pairs: Pairs, rng: random.Random) -> str:
    ratios = [ln_ratio(p["A"], p["B"]) for p in pairs]
    paired = [round_paired(p["A"], p["B"]) for p in pairs]
    within = statistics.mean(rounds_var(p["A"], p["B"], rng) for p in pairs)
    pair_var = statistics.variance(ratios)
    round_sd = math.sqrt(statistics.mean(statistics.variance([math.log(x) for x in p[s]])
                                         for p in pairs for s in ("A", "B")))
    process = (pair_var - within) / 2
    shown = f"{math.sqrt(process):.4f}" if process > 0 else "none seen"
    return (f"| {name} | {len(pairs[0]['A'])} | {len(pairs)} | {round_sd:.3f} | {math.sqrt(pair_var):.4f} | "
            f"{math.sqrt(within):.4f} | {shown} | {statistics.stdev(paired):.4f} |")


def split_table(verdicts: dict[str, Pairs]) -> str:
    rng = random.Random(0)
    return "\n".join(["| verdict | rounds a process | pairs | a round's sd | pair sd of ln(B/A), ratio of medians | "
                      "of it, the rounds' part | a process's own level, sd | pair sd, round-paired |",
                      "|---|--:|--:|--:|--:|--:|--:|--:|",
                      *(split_row(n, p, rng) for n, p in verdicts.items() if len(p) >= 3)])


def banked(docs: list[dict[str, Any]], verdicts: dict[str, Pairs], first: int | None) -> dict[str, list[tuple]]:
    """Each estimate's (A, B, seconds) per pair of a row's verdicts (round-paired: (1, B/A, seconds))."""
    from batchperf.calibrate.replay import pair_seconds

    out: dict[str, list[tuple]] = {"ratio of medians": [], "round-paired": []}
    for doc in docs:
        design = doc["settings"].get("design", "sequential")
        for pair, rounds in zip(doc["pairs"], verdicts[Path(doc["folder"]).name]):
            a, b, seconds = rounds["A"], rounds["B"], pair_seconds(pair, design)
            if first is not None and first < len(a):
                if not (doc.get("rounds") or {}).get("round_s"):
                    raise SystemExit(f"noise_split: {doc['folder']}: --first-rounds needs the verdict's measured round "
                                     "seconds (ab.json rounds.round_s), which runs before 2026-12-07 did not record")
                seconds -= (len(a) - first) * doc["rounds"]["round_s"] * (2 if design == "resident" else 1)
                a, b = a[:first], b[:first]
            out["ratio of medians"].append((statistics.median(a), statistics.median(b), seconds))
            out["round-paired"].append((1.0, math.exp(round_paired(a, b)), seconds))
    return out


def replay_table(folder: Path, verdicts: dict[str, Pairs], n: int, first: int | None) -> str:
    import numpy as np

    from batchperf.calibrate.replay import Bank, pair_seconds, replay
    from batchperf.calibrate.scores import measured

    lines = ["| row | pairs measured (verdicts) | each pair's B/A | regression | no change | improvement | "
             "inconclusive | median pairs | median minutes |", "|---|--:|---|--:|--:|--:|--:|--:|--:|"]
    for (kind, slowdown), docs in sorted(measured(folder).items()):
        docs = [d for d in docs if Path(d["folder"]).name in verdicts]
        if not docs:
            continue
        overhead = statistics.median(d["elapsed_s"] - sum(pair_seconds(p, d["settings"].get("design", "sequential"))
                                                          for p in d["pairs"]) for d in docs)
        for how, pairs in banked(docs, verdicts, first).items():
            bank = Bank(pairs, overhead, docs[0]["settings"], len(docs), exchangeable=not slowdown)
            rng = np.random.default_rng(1)
            scores = [replay(bank, METRIC, rng) for _ in range(n)]
            rates = [sum(s.verdict == v for s in scores) / n
                     for v in ("regression", "no change", "improvement", "inconclusive")]
            lines.append(f"| {kind} {slowdown:.0%} | {len(pairs)} ({len(docs)}) | {how} | "
                         + " | ".join(f"{r:.1%}" for r in rates)
                         + f" | {statistics.median(s.pairs for s in scores):.0f}"
                           f" | {statistics.median(s.minutes for s in scores):.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="a data folder: verdicts' ab.json and rounds.json")
    parser.add_argument("--collect", type=Path, metavar="KEEP",
                        help="first write FOLDER/rounds.json from a kept study's pairs' results files")
    parser.add_argument("--replay", type=int, default=0, metavar="N", help="N replayed verdicts a row, both ways")
    parser.add_argument("--first-rounds", type=int, metavar="R", help="with --replay: each process's first R rounds")
    args = parser.parse_args(argv)
    rounds_file = args.folder / "rounds.json"
    if args.collect:
        # only the verdicts the data folder keeps (a kept study also holds the one an interruption cut short)
        verdicts = {k: v for k, v in collect(args.collect).items() if (args.folder / k / "ab.json").exists()}
        rounds_file.write_text(json.dumps({"metric": METRIC, "verdicts": verdicts}, separators=(",", ":")) + "\n")
    try:
        verdicts = json.loads(rounds_file.read_text())["verdicts"]
    except (OSError, ValueError, KeyError) as exc:
        print(f"noise_split: {rounds_file}: {exc}; write it with --collect KEEP", file=sys.stderr)
        return 2
    print(split_table(verdicts))
    if args.replay:
        print()
        print(replay_table(args.folder, verdicts, args.replay, args.first_rounds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
