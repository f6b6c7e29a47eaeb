"""Does the order in which two kept servers start decide which side reads faster? (issue 56's kept-server A/A row)

With ``--keep-servers`` the two sides' servers start one after the other (the warm-up's order is drawn, and a
restart puts the side that runs first in its pair first; ``ab.json``'s ``server_starts``). For every A/A pair of
the verdicts given, this takes ln(B/A) of the deciding metric (round-paired where ``ab.json`` has it, else the
ratio of medians) and turns it into ln(second-started side / first-started side), then pools them: were start
order irrelevant, those would centre on 0 and be positive about half the time (a sign test says how unlikely the
count is otherwise). Verdicts from before restarts existed (no ``server_starts``) started A's server first in
their warm-up and kept both for the whole run: ``--unrecorded-first A`` says so. Without ``--keep-servers`` each
process starts its own server in its first round, the pair's first side first (the other waits at its round gate),
so the same question is asked of the fresh-server rows, whose pairs alternate the order.

    python studies/ab-detector/kept_order.py studies/ab-detector/data/vllm-server-kept-restarts
    python studies/ab-detector/kept_order.py studies/ab-detector/data/vllm-server-kept --unrecorded-first A
    python studies/ab-detector/kept_order.py studies/ab-detector/data/vllm-server
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

import numpy as np
from scipy.stats import binomtest
from scipy.stats import t as student


def first_side(ab: dict, index: int, unrecorded: str | None) -> str | None:
    """The side whose server started first among the servers that measured pair ``index``: from ``server_starts``
    with kept servers; without them each process starts its own, the side that runs first in the pair first."""
    if not ab["settings"].get("keep_servers"):
        return ab["pairs"][index - 1]["order"][0]
    current = [s for s in ab.get("server_starts") or [] if s["from_pair"] <= index]
    if current:
        return current[-1]["first"]
    return unrecorded


def pair_logs(ab: dict, metric: str) -> list[float]:
    """ln(B/A) per pair of ``metric`` in the run's one cell: round-paired where kept, else the ratio of medians."""
    (cell,) = ab["cells"]
    (m,) = [x for x in cell["metrics"] if x["metric"] == metric]
    ratios = m.get("paired_ratios") or m["ratios"]
    return [math.log(r) for r in ratios]


def verdict_rows(folder: Path, metric: str, unrecorded: str | None) -> list[tuple[str, int, str, float]]:
    """(verdict, pair, the side started first, ln(second / first)) for every pair of every A/A verdict in
    ``folder`` (its ``*-0-*/ab.json``)."""
    rows = []
    for path in sorted(folder.glob("*-0-*/ab.json")):
        ab = json.loads(path.read_text())
        for index, value in enumerate(pair_logs(ab, metric), start=1):
            first = first_side(ab, index, unrecorded)
            if first is None:
                continue
            rows.append((path.parent.name, index, first, value if first == "A" else -value))
    return rows


def b_over_a(rows: list[tuple[str, int, str, float]]) -> list[float]:
    """Each row's ln(B/A) again (its ln(second / first) with the sign of the side that started second)."""
    return [value if first == "A" else -value for _, _, first, value in rows]


def balanced(rows: list[tuple[str, int, str, float]]) -> str:
    """The mean ln(B/A) of the pairs whose A server started first and of those whose B server did, averaged: the
    estimate with the start order's lean cancelled whatever the pairs' split ("-" without both orders)."""
    by_first = {side: [v for v, r in zip(b_over_a(rows), rows) if r[2] == side] for side in ("A", "B")}
    if not all(by_first.values()):
        return "-"
    return f"{50 * (statistics.mean(by_first['A']) + statistics.mean(by_first['B'])):+.2f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path, help="a detector data folder of kept-server A/A verdicts")
    parser.add_argument("--metric", default="output_throughput")
    parser.add_argument("--unrecorded-first", choices=("A", "B"), default=None,
                        help="the side started first where ab.json records no server_starts")
    args = parser.parse_args(argv)
    rows = verdict_rows(args.folder, args.metric, args.unrecorded_first)
    if not rows:
        print(f"{args.folder}: no A/A verdict with a known server start order", file=sys.stderr)
        return 2
    print("| verdict | pairs, the side started first | ln(second / first) per pair, % | mean ln(B/A), % | the two "
          "start orders' means averaged, % |")
    print("|---|---|---|--:|--:|")
    means = []  # each verdict's mean ln(B/A)
    for name in sorted({r[0] for r in rows}):
        mine = [r for r in rows if r[0] == name]
        means.append(statistics.mean(b_over_a(mine)))
        print(f"| {name} | {' '.join(f'{r[1]}{r[2]}' for r in mine)} | "
              f"{', '.join(f'{100 * r[3]:+.1f}' for r in mine)} | {100 * means[-1]:+.2f} | {balanced(mine)} |")
    values = [r[3] for r in rows]
    positive = sum(v > 0 for v in values)
    test = binomtest(positive, len(values), 0.5)
    print(f"\n{len(values)} pairs: the side started second read {100 * statistics.mean(values):+.2f}% on average "
          f"(median {100 * statistics.median(values):+.2f}%), higher in {positive} of {len(values)} "
          f"(sign test p = {test.pvalue:.3g})")
    print(resolution(b_over_a(rows), means))
    return 0


def resolution(pairs: list[float], verdicts: list[float], target: float = 0.003) -> str:
    """What the row can resolve of a lean in ln(B/A): the pooled pairs' mean with its 95% t-interval, the pairs
    whose interval would be ``target`` wide either side at this sd, and how often a row of this many verdicts,
    each as spread as these, puts its median estimate inside ±``target`` when there is no lean at all (normal
    verdicts, 20,000 rows drawn)."""
    n, sd = len(pairs), statistics.stdev(pairs)
    half = student.ppf(0.975, n - 1) * sd / math.sqrt(n)
    needed = math.ceil((1.96 * sd / target) ** 2)
    spread = statistics.stdev(verdicts)
    medians = np.median(np.random.default_rng(1).normal(0, spread, (20_000, len(verdicts))), axis=1)
    inside = float(np.mean(np.abs(medians) <= target))
    return (f"pooled: ln(B/A) {100 * statistics.mean(pairs):+.2f}% [{100 * (statistics.mean(pairs) - half):+.2f}%, "
            f"{100 * (statistics.mean(pairs) + half):+.2f}%] (95%, {n} pairs, sd {100 * sd:.2f}%); an interval of "
            f"±{100 * target:g}% needs about {needed} pairs at this sd; with no lean, a row of {len(verdicts)} "
            f"verdicts spread as these (sd {100 * spread:.2f}%) has its median within ±{100 * target:g}% "
            f"{100 * inside:.0f}% of the time")


if __name__ == "__main__":
    sys.exit(main())
