"""The wire study's tables from its raw runs (``tools/wire_capture.py --json``): one Markdown table per
concurrency, then how many runs were within 5% of the wire and how many misses the client-lag check marked;
last, the client-lag check's TTFT rule derived from the runs (the server's front end, which vLLM's own TTFT
does not time) and what the rule in force marks among them.

    PYTHONPATH=src python studies/wire/table.py studies/wire/data/runs.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from batchperf.measure.client_lag import CLIENT_WITHIN, TTFT_RATIO_BOUND, TTFT_SLACK_MS

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


def ttft_rule(runs: list[dict]) -> str:
    """How far the wire's mean TTFT ran above the server's own (its front end: (wire - slack) / server, the worst
    run), the ratio that leaves a client within the study's bar unmarked, and what the rule in force marks."""
    timed = [r for r in runs if r["check"].get("server_mean_ttft_ms")]
    if not timed:
        return "no run has the server's own TTFT: no TTFT rule to derive"
    front = max(timed, key=lambda r: (r["wire"]["mean_ttft_ms"] - TTFT_SLACK_MS) / r["check"]["server_mean_ttft_ms"])
    worst = (front["wire"]["mean_ttft_ms"] - TTFT_SLACK_MS) / front["check"]["server_mean_ttft_ms"]
    marked = [r for r in timed if r["client"]["mean_ttft_ms"] > r["check"]["server_mean_ttft_ms"] * TTFT_RATIO_BOUND
              + TTFT_SLACK_MS]
    return (f"TTFT rule: the wire's mean TTFT reached the server's x {worst:.3f} + {TTFT_SLACK_MS:g} ms (concurrency "
            f"{front['concurrency']}, run {front['run']}); a client within {CLIENT_WITHIN:.0%} of the wire: x "
            f"{worst * (1 + CLIENT_WITHIN):.3f}. The rule in force, x {TTFT_RATIO_BOUND:g} + {TTFT_SLACK_MS:g} ms, "
            f"marks {len(marked)} of {len(timed)} runs ({sum(not r['within'] for r in marked)} of them off the wire).")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", type=Path, metavar="RUNS.json", help="raw runs of tools/wire_capture.py --json")
    args = parser.parse_args(argv)
    try:
        runs = json.loads(args.runs.read_text())
    except (OSError, ValueError) as exc:
        parser.error(f"{args.runs}: {exc}")
    for concurrency in sorted({r["concurrency"] for r in runs}):
        mine = [r for r in runs if r["concurrency"] == concurrency]
        misses = [r for r in mine if not r["within"]]
        marked = [r for r in misses if r["client_bound"]]
        print(f"**concurrency {concurrency}**\n\n{HEAD}")
        print("\n".join(row(r) for r in mine))
        print(f"\n{len(mine) - len(misses)} of {len(mine)} runs within 5% on all four means; {len(misses)} missed, "
              f"{len(marked)} of them marked client-bound; {sum(r['client_bound'] for r in mine)} run(s) marked in "
              "all.\n")
    print(ttft_rule(runs))


if __name__ == "__main__":
    main()
