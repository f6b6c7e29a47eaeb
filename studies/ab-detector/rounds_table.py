"""How a pair's sd of ln(B/A) depends on the rounds per process, from verdicts already measured (no new runs).

Each pair's two processes are cut to their first R rounds (the rounds run in turns in the resident design, so the
first R of each are the pair's first R turns), and ln(B/A) of the two medians is taken again, for R = 5 … the
rounds measured. The per-round values are read from the pairs' results files (``pair-NNN-A.json``) and written
beside each verdict as ``rounds.json`` (a few kB: the results files, 2–3 MB a pair, are not kept in the
repository), which is read instead when the results files are gone:

    python studies/ab-detector/rounds_table.py studies/ab-detector/data/vllm-server-kept-r40 [--metric output_throughput]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

CUTS = (5, 10, 15, 20, 30, 40)


def per_round(verdict: Path, metric: str) -> list[dict[str, list[float]]]:
    """Each pair's per-round ``metric`` of A and B, from the results files (and saved), else from rounds.json."""
    saved = verdict / "rounds.json"
    pairs = sorted({p.name[:8] for p in verdict.glob("pair-*-A.json")})
    if pairs:
        values = []
        for pair in pairs:
            sides = {}
            for side in ("A", "B"):
                bench = json.loads((verdict / f"{pair}-{side}.json").read_text())["benchmarks"]
                sides[side] = [r[metric] for r in bench[0]["extra_info"]["rounds"]] if bench else []
            values.append(sides)
        saved.write_text(json.dumps({"metric": metric, "pairs": values}) + "\n")
        return values
    if saved.exists():
        doc = json.loads(saved.read_text())
        if doc["metric"] == metric:
            return doc["pairs"]
    sys.exit(f"{verdict}: neither pair results files nor a rounds.json of {metric}")


def table(verdicts: list[Path], metric: str) -> str:
    pairs = [p for v in verdicts for p in per_round(v, metric) if p["A"] and p["B"]]
    measured = min(min(len(p["A"]), len(p["B"])) for p in pairs)
    lines = [f"{len(pairs)} pairs from {len(verdicts)} verdict(s), {metric}", "",
             "| rounds a process | pair sd of ln(B/A) | mean ln(B/A) |", "|---:|---:|---:|"]
    for cut in [c for c in CUTS if c <= measured]:
        logs = [math.log(statistics.median(p["B"][:cut]) / statistics.median(p["A"][:cut])) for p in pairs]
        lines.append(f"| {cut} | {statistics.stdev(logs):.4f} | {statistics.mean(logs):+.4f} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path, help="a verdict's folder, or a detector --keep folder of verdicts")
    parser.add_argument("--metric", default="output_throughput")
    args = parser.parse_args()
    verdicts = sorted(p.parent for p in args.folder.glob("**/ab.json"))
    if not verdicts:
        sys.exit(f"{args.folder}: no verdict (ab.json) under it")
    print(table(verdicts, args.metric))
    return 0


if __name__ == "__main__":
    sys.exit(main())
