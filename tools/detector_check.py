#!/usr/bin/env python
"""Does the gate catch real slowdowns and stay quiet on noise? A/A reruns and injected slowdowns on the CPU tier.

``--ref-runs`` reference runs of a narrowed CPU cell set, pooled as ``batchperf
refresh`` pools them (so the reference carries their run-to-run spread), then ``--aa`` reruns of the same
code (A/A) and ``--trials`` reruns per slowdown size with
``BATCHPERF_INJECT_SLOWDOWN`` set (each forward pass waits that fraction of its
own time; see ``batchperf.backends.inject``). Every rerun is a real ``pytest
--benchmark-compare=REF`` run, so the gate decides exactly as in CI, including
the re-measurement of a first violation. It prints the false-alarm rate, the
detection rate per size, and the worst A/A change per metric (what the CPU-tier
floors must stay above).

    OMP_NUM_THREADS=1 PYTHONPATH=src python tools/detector_check.py   # ~9 min on a quiet 2-core VM
    PYTHONPATH=src python tools/detector_check.py --aa 3 --trials 3 --slowdowns 0.3
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import tempfile
import time
from pathlib import Path

from batchperf.launch.child import run_guarded
from batchperf.launch.environ import INJECT_SLOWDOWN_ENV
from batchperf.launch.suite import suite_command
from batchperf.measure.catalogue import GATED, Direction
from batchperf.regress.gate import GateConfig, compare_cell, relative_change, relative_spread
from batchperf.regress.store import load_run, pool_runs
from batchperf.regress.verdict import stored
from batchperf.results.io import read_results, write_results
from batchperf.results.record import CellRecord

# A compute-bound cell of the CPU tier (its run-to-run spread is what the CPU floors are set for); the
# dispatch-bound bs4 p64 cells swing more and are judged by their own spread, see docs/baselines.md.
NARROW = ("-m cpu -p no:cacheprovider --batchperf-backends hf-static --batchperf-batch-sizes 8 "
          "--batchperf-prompt-lens 512 --batchperf-concurrency 16 perf_tests")


def pytest_run(args: list[str], out: Path, slowdown: float) -> dict[str, CellRecord]:
    env = {**os.environ, INJECT_SLOWDOWN_ENV: str(slowdown) if slowdown else ""}
    cmd = suite_command(args, results=out, quiet=True)
    with tempfile.TemporaryFile("w+", encoding="utf-8") as fh:
        code = run_guarded(cmd, env=env, stdout=fh, foreground=True).returncode
        fh.seek(0)
        output = fh.read()
    if not out.exists():
        raise SystemExit(f"detector_check: pytest exited {code} without results:\n{output[-5000:]}")
    return read_results(out).cells


def adverse(rule_metric: str, direction: Direction, base: CellRecord, cur: CellRecord) -> float | None:
    """The metric's relative change in its bad direction (positive = worse)."""
    a, b = base.value(rule_metric), cur.value(rule_metric)
    if a is None or b is None:
        return None
    change = relative_change(a, b)
    return {Direction.HIGHER: -change, Direction.LOWER: change, Direction.EXACT: abs(change)}[direction]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ref-runs", type=int, default=3, help="reference runs, pooled (default 3)")
    parser.add_argument("--aa", type=int, default=10, help="A/A reruns (default 10)")
    parser.add_argument("--trials", type=int, default=10, help="reruns per slowdown size (default 10)")
    parser.add_argument("--slowdowns", default="0.1,0.3", help="comma-separated forward-pass slowdowns (default 0.1,0.3)")
    parser.add_argument("--pytest-args", default=NARROW, help=f"the cell selection (default: {NARROW!r})")
    parser.add_argument("--keep", type=Path, default=None, help="keep every results file in this folder")
    args = parser.parse_args()
    sizes = [float(s) for s in args.slowdowns.split(",") if s.strip()]
    selection = shlex.split(args.pytest_args)
    work = args.keep or Path(tempfile.mkdtemp(prefix="batchperf-detector-"))
    work.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()

    ref_runs = []
    for i in range(args.ref_runs):
        pytest_run(selection, work / f"ref-{i}.json", 0.0)
        ref_runs.append(load_run(work / f"ref-{i}.json"))
    pooled = pool_runs(ref_runs)
    ref_path = write_results(work / "ref.json", pooled.header, pooled.entries())
    ref = pooled.cells
    for name, rec in ref.items():
        spread = ", ".join(f"{m} ±{relative_spread(rec, 'metrics.' + m):.1%}" for m in ("output_throughput", "p99_e2el_ms"))
        print(f"reference {name}: {len(rec.rounds)} rounds from {args.ref_runs} runs; spread {spread}", flush=True)
    compare = [*selection, f"--benchmark-compare={ref_path}"]
    plan = [(0.0, i) for i in range(args.aa)] + [(s, i) for s in sizes for i in range(args.trials)]
    rows: dict[float, list[tuple[bool, bool, list[float], list[float]]]] = {}
    firsts: dict[float, list[dict[str, CellRecord]]] = {}  # every rerun's first measurement, to re-score at other k
    worst_aa: dict[str, float] = {}
    for n, (size, i) in enumerate(plan, 1):
        run = pytest_run(compare, work / f"run-{size:g}-{i}.json", size)
        verdicts = [(rec.gate or {}).get("verdict") for rec in run.values()]
        alarm = any(v is not None and v.failed for v in map(stored, verdicts))
        remeasured = any((rec.gate or {}).get("remeasured") for rec in run.values())
        tput = [-(adverse("metrics.output_throughput", Direction.HIGHER, ref[k], v) or 0) for k, v in run.items()]
        e2el = [adverse("metrics.p99_e2el_ms", Direction.LOWER, ref[k], v) or 0 for k, v in run.items()]
        rows.setdefault(size, []).append((alarm, remeasured, tput, e2el))
        firsts.setdefault(size, []).append(run)
        if size == 0.0:
            for rule in GATED:
                for k, info in run.items():
                    worse = adverse(rule.path, rule.direction, ref[k], info)
                    if worse is not None:
                        worst_aa[rule.name] = max(worst_aa.get(rule.name, -1.0), worse)
        which = sorted({m for rec in run.values() for m in (rec.gate or {}).get("regressed", [])})
        print(f"[{n}/{len(plan)}] slowdown {size:.0%} run {i + 1}: {'ALARM' if alarm else 'quiet'}"
              f"{' (' + ', '.join(which) + ')' if which else ''}"
              f"{' (re-measured)' if remeasured else ''}; throughput {statistics.median(tput):+.1%}, "
              f"p99 E2EL {statistics.median(e2el):+.1%}  [{time.monotonic() - started:.0f}s]", flush=True)

    print()
    print("| injected forward-pass slowdown | runs | alarms | rate | re-measured | median throughput change "
          "| median P99 E2EL change |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for size, results in rows.items():
        alarms = sum(a for a, _, _, _ in results)
        label = "0% (A/A)" if size == 0 else f"{size:.0%}"
        print(f"| {label} | {len(results)} | {alarms} | {alarms / len(results):.0%} "
              f"| {sum(r for _, r, _, _ in results)} "
              f"| {statistics.median(x for _, _, t, _ in results for x in t):+.1%} "
              f"| {statistics.median(x for _, _, _, e in results for x in e):+.1%} |")
    print()
    print("the same first measurements re-scored at other k (no re-measurement, so alarms are an upper bound):")
    for k in (1.0, 2.0, 3.0):
        rates = []
        for size, runs in firsts.items():
            alarms = sum(any(compare_cell(n, ref[n], info, GateConfig(k=k)).failed for n, info in run.items())
                         for run in runs)
            rates.append(f"{'A/A' if size == 0 else f'{size:.0%}'} {alarms}/{len(runs)}")
        print(f"  k={k:g}: " + ", ".join(rates))
    print()
    print("worst A/A change per metric, in its bad direction (a floor must stay above it):")
    for rule in GATED:
        if rule.name in worst_aa:
            floor = "exact" if rule.direction is Direction.EXACT else f"floor {rule.floor('cpu'):.0%}"
            print(f"  {rule.name:<28} {worst_aa[rule.name]:+.1%}   ({floor})")
    print(f"\n{len(plan) + args.ref_runs} pytest runs in {time.monotonic() - started:.0f}s; results in {work}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
