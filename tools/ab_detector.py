#!/usr/bin/env python
"""How good is ``batchperf ab``'s verdict on this machine? A/A verdicts and verdicts with B slowed, per cell.

For each cell kind, ``--aa`` verdicts of this interpreter against itself (a "regression" there is a false
alarm) and ``--slowed`` verdicts with B's forward passes slowed by the documented injection
(``BATCHPERF_INJECT_SLOWDOWN``, see ``batchperf.measure.inject``; it reaches in-process models, so both cells
are hf-static ones). Every verdict is a full ``batchperf ab`` run (``run_ab``: real pytest processes,
interleaved A B / B A, stopping as soon as the answer is clear, or at the budget). It prints one line per
verdict and a table: regression rate, median pairs used, median minutes, median interval width, and the
issue's targets (A/A "regression" <= 1/20 per cell; compute-bound 5% caught >= 18/20; dispatch-bound 10%
caught >= 18/20; each verdict within 10 minutes). The full study takes hours and needs a QUIET machine:

    OMP_NUM_THREADS=1 PYTHONPATH=src python tools/ab_detector.py --keep results/ab-detector
    OMP_NUM_THREADS=1 PYTHONPATH=src python tools/ab_detector.py --aa 2 --slowed 2 --cells dispatch \\
        --max-pairs 2 --alpha 0.6 --rounds 1 --extra "--batchperf-num-prompts 8"   # a smoke test (minutes)
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from batchperf.measure.inject import ENV_SLOWDOWN
from batchperf.regress.ab import AbResult, CellVerdict, Settings, run_ab
from batchperf.regress.env import Environment, default_checkout


@dataclass(frozen=True)
class Kind:
    name: str
    selection: tuple[str, ...]
    slowdown: float  # injected into B for the "slowed" verdicts
    target: int  # of 20: slowed verdicts that must say regression


def _cell(bs: str, prompt: str, conc: str) -> tuple[str, ...]:
    return ("-m", "cpu", "--batchperf-backends", "hf-static", "--batchperf-batch-sizes", bs,
            "--batchperf-prompt-lens", prompt, "--batchperf-concurrency", conc)


KINDS = {
    "compute": Kind("compute-bound hf-static bs8 p512 c16", _cell("8", "512", "16"), 0.05, 18),
    "dispatch": Kind("dispatch-bound hf-static bs4 p64 c16", _cell("4", "64", "16"), 0.10, 18),
}
AA_TARGET = 1  # of 20: A/A verdicts allowed to say regression
MINUTES_TARGET = 10.0


@dataclass(frozen=True)
class Score:
    verdict: str
    pairs: int
    minutes: float
    width: float | None  # the deciding metric's final interval width (B/A - 1), None when unbounded
    estimate: float | None


def score(result: AbResult, metric: str) -> Score:
    (cell,) = result.cells.values()
    m = cell.metrics.get(metric)
    iv = m.interval if m else None
    width = iv.width if iv is not None and iv.width != float("inf") else None
    estimate = None
    if iv is not None:
        from batchperf.regress.ab_stats import relative

        estimate = relative(iv.estimate)
    return Score(cell.verdict.value, len(result.pairs), result.elapsed_s / 60, width, estimate)


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def table(rows: dict[tuple[str, float], list[Score]], targets: dict[tuple[str, float], str]) -> str:
    lines = ["| cell | B slowed by | verdicts | regression | no change | inconclusive | other | median pairs "
             "| median minutes (max) | median interval width | median estimate | target |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for (kind, slowdown), scores in rows.items():
        n = len(scores)
        count = {v: sum(s.verdict == v for s in scores) for v in ("regression", "no change", "inconclusive")}
        other = n - sum(count.values())
        minutes = [s.minutes for s in scores]
        lines.append(
            f"| {kind} | {slowdown:.0%}{' (A/A)' if not slowdown else ''} | {n} | {count['regression']} "
            f"({count['regression'] / n:.0%}) | {count['no change']} | {count['inconclusive']} | {other} "
            f"| {fmt(median([s.pairs for s in scores]), '.0f')} | {fmt(median(minutes), '.1f')} ({max(minutes):.1f}) "
            f"| {fmt(median([s.width for s in scores if s.width is not None]), '.1%')} "
            f"| {fmt(median([s.estimate for s in scores if s.estimate is not None]), '+.1%')} "
            f"| {targets[(kind, slowdown)]} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--aa", type=int, default=20, help="A/A verdicts per cell (default 20)")
    parser.add_argument("--slowed", type=int, default=20, help="verdicts per cell with B slowed (default 20)")
    parser.add_argument("--cells", default="compute,dispatch", help=f"cell kinds, of {', '.join(KINDS)} (default both)")
    parser.add_argument("--slowdown", action="append", default=[], metavar="KIND=FRAC",
                        help="override a kind's injected slowdown, e.g. dispatch=0.2")
    parser.add_argument("--metrics", default="output_throughput", help="deciding metrics (default output_throughput)")
    parser.add_argument("--margin", type=float, default=0.03, help="equivalence margin (default 0.03)")
    parser.add_argument("--alpha", type=float, default=0.05, help="ab's false-alarm rate per verdict (default 0.05)")
    parser.add_argument("--max-pairs", type=int, default=30, help="ab's budget of pairs per verdict (default 30)")
    parser.add_argument("--max-minutes", type=float, default=MINUTES_TARGET,
                        help=f"ab's budget of minutes per verdict (default {MINUTES_TARGET:g}, the target)")
    parser.add_argument("--rounds", type=int, default=5, help="measured rounds per process (default 5)")
    parser.add_argument("--extra", default="", metavar="ARGS",
                        help="more pytest arguments for every process, e.g. '--batchperf-num-prompts 8' (smoke runs)")
    parser.add_argument("--keep", type=Path, default=None, help="keep every verdict's folder here")
    args = parser.parse_args()
    kinds = [k.strip() for k in args.cells.split(",") if k.strip()]
    if unknown := [k for k in kinds if k not in KINDS]:
        parser.error(f"unknown cell kind(s) {unknown}; known: {', '.join(KINDS)}")
    overrides = {k: float(v) for k, _, v in (s.partition("=") for s in args.slowdown)}
    work = args.keep or Path(tempfile.mkdtemp(prefix="batchperf-ab-detector-"))
    work.mkdir(parents=True, exist_ok=True)
    here = default_checkout()
    python = Path(sys.executable)
    metrics = tuple(m.strip() for m in args.metrics.split(",") if m.strip())
    plan = [(kind, 0.0, i) for kind in kinds for i in range(args.aa)]
    plan += [(kind, overrides.get(kind, KINDS[kind].slowdown), i) for kind in kinds for i in range(args.slowed)]
    plan.sort(key=lambda p: (p[2], p[0], p[1]))  # interleave kinds and A/A vs slowed, so drift hits all alike
    rows: dict[tuple[str, float], list[Score]] = {}
    targets: dict[tuple[str, float], str] = {}
    started = time.monotonic()
    for n, (kind, slowdown, i) in enumerate(plan, 1):
        spec = KINDS[kind]
        b_vars = ((ENV_SLOWDOWN, str(slowdown)),) if slowdown else ()
        settings = Settings(Environment("A", python, dir=here), Environment("B", python, b_vars, here),
                            (*spec.selection, *shlex.split(args.extra)), work / f"{kind}-{slowdown:g}-{i:02d}", margin=args.margin,
                            metrics=metrics, alpha=args.alpha, max_pairs=args.max_pairs,
                            max_minutes=args.max_minutes, rounds=args.rounds)
        result = run_ab(settings)
        s = score(result, metrics[0])
        key = (spec.name, slowdown)
        rows.setdefault(key, []).append(s)
        targets[key] = (f"regression <= {AA_TARGET}/20" if not slowdown else f"regression >= {spec.target}/20") + \
            f", each <= {MINUTES_TARGET:g} min"
        load = result.to_dict()["load_avg_1m"]
        print(f"[{n}/{len(plan)}] {kind} slowdown {slowdown:.0%} #{i + 1}: {s.verdict} after {s.pairs} pair(s), "
              f"{s.minutes:.1f} min; {metrics[0]} {fmt(s.estimate, '+.1%')} width {fmt(s.width, '.1%')}; "
              f"load {fmt(load['median'] if load else None, '.2f')}  [{(time.monotonic() - started) / 60:.0f} min]", flush=True)
        (work / "scores.json").write_text(json.dumps(
            {f"{k}|{sl}": [vars(x) for x in v] for (k, sl), v in rows.items()}, indent=1))
        if result.status in ("interrupted", "failed"):
            print(f"ab_detector: stopping, the verdict {result.status}: {result.reason}", file=sys.stderr)
            break
    print()
    print(table(rows, targets))
    print(f"\nsettings: alpha {args.alpha}, margin ±{args.margin:.0%}, deciding {', '.join(metrics)}, at most "
          f"{args.max_pairs} pairs / {args.max_minutes:g} min per verdict, {args.rounds} rounds per process; "
          f"every verdict's files in {work}")
    return 0 if all(s.verdict != CellVerdict.FAILED.value for v in rows.values() for s in v) else 1


if __name__ == "__main__":
    sys.exit(main())
