"""The wire study's tables from its raw runs (``tools/wire_capture.py --json``): one Markdown table per
concurrency, then how many runs were within 5% of the wire and how many misses the client-lag check marked.

    python studies/wire/table.py studies/wire/data/runs.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

MEANS = ("mean_ttft_ms", "mean_tpot_ms", "mean_itl_ms", "mean_e2el_ms")
HEAD = ("| run | load avg 1m | mean TTFT ms client / wire | mean TPOT ms | mean ITL ms | mean E2EL ms | worst mean off "
        "the wire | chunk late ms p50 / p99 | loop lag max ms | within 5% | marked client-bound |\n"
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|")


def row(r: dict) -> str:
    c, w = r["client"], r["wire"]
    worst = max(r["ratio"], key=lambda k: abs(r["ratio"][k] - 1))
    off = f"{worst.split('_')[1].upper()} {100 * (r['ratio'][worst] - 1):+.1f}%"
    late = r["chunk_late_ms"]
    load = r["load_average_1m"]
    marked = "no"
    if r["client_bound"]:
        stalls = r.get("stalls", [])
        marked = "yes" + (f" ({len(stalls)} stall(s), longest {max(s['ms'] for s in stalls):.0f} ms; requests "
                          f"{', '.join(map(str, sorted({i for s in stalls for i in s['request_ids']})))})" if stalls else
                          f" ({'; '.join(r['reasons'])})")
    cells = [str(r["run"]), f"{load['before']:.1f}–{load['after']:.1f}",
             *(f"{c[k]:.1f} / {w[k]:.1f}" for k in MEANS), off,
             f"{late.get('median', 0):.1f} / {late.get('p99', 0):.1f}", f"{r['check'].get('loop_lag_max_ms', 0):.1f}",
             "yes" if r["within"] else "**no**", marked]
    return "| " + " | ".join(cells) + " |"


def main(path: str) -> None:
    runs = json.loads(Path(path).read_text())
    for concurrency in sorted({r["concurrency"] for r in runs}):
        mine = [r for r in runs if r["concurrency"] == concurrency]
        misses = [r for r in mine if not r["within"]]
        marked = [r for r in misses if r["client_bound"]]
        print(f"**concurrency {concurrency}**\n\n{HEAD}")
        print("\n".join(row(r) for r in mine))
        print(f"\n{len(mine) - len(misses)} of {len(mine)} runs within 5% on all four means; {len(misses)} missed, "
              f"{len(marked)} of them marked client-bound; {sum(r['client_bound'] for r in mine)} run(s) marked in "
              "all.\n")


if __name__ == "__main__":
    main(sys.argv[1])
