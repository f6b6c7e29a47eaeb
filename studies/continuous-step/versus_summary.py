"""A `batchperf versus --json` file as the issue-40 table: each backend's best and median output tok/s, the
ratio of one backend over another (best over best, and the median of the paired ratios), and the median P99 TTFT.

    PYTHONPATH=src python studies/continuous-step/versus_summary.py studies/continuous-step/data/after.json \\
        [--over vllm] [--backend continuous]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json", type=Path)
    parser.add_argument("--backend", default="continuous")
    parser.add_argument("--over", default="vllm")
    args = parser.parse_args(argv)
    data = json.loads(args.json.read_text())
    a, b = args.backend, args.over
    print(f"| prompt | batch | conc | {a} best | {b} best | {a}/{b} best | {a}/{b} median paired | "
          f"{a} P99 TTFT ms | {b} P99 TTFT ms |")
    print("|---|--:|--:|--:|--:|--:|--:|--:|--:|")
    for cell in data["cells"]:
        ta, tb = cell["throughput"][a], cell["throughput"][b]
        paired = statistics.median(x / y for x, y in zip(ta, tb))  # the runs were interleaved pairwise
        ttft = cell.get("p99_ttft_ms", {})
        fa = f"{statistics.median(ttft[a]):.0f}" if ttft.get(a) else "-"
        fb = f"{statistics.median(ttft[b]):.0f}" if ttft.get(b) else "-"
        c = cell["cell"]
        print(f"| {c['prompt_len']} | {c['batch_size']} | {c['concurrency']} | {max(ta):.1f} | {max(tb):.1f} | "
              f"{max(ta) / max(tb):.2f} | {paired:.2f} | {fa} | {fb} |")


if __name__ == "__main__":
    main()
