#!/usr/bin/env python
"""How good is ``batchperf ab``'s verdict on this machine? A/A verdicts and verdicts with B slowed, per cell.

For each cell kind, ``--aa`` verdicts of this interpreter against itself (a "regression" there is a false
alarm) and ``--slowed`` verdicts with B's forward passes slowed by the documented injection
(``BATCHPERF_INJECT_SLOWDOWN``, see ``batchperf.backends.inject``: in-process models, and through its vLLM
plugin the model in vLLM's engine core, so the ``vllm`` and ``server`` kinds are slowed where vLLM computes).
Every verdict is a full ``batchperf ab`` run (``run_ab``: real pytest processes, interleaved A B / B A,
stopping as soon as the answer is clear, or at the budget). It prints one line per verdict and a table:
regression rate, median pairs used, median minutes, median interval width, and the issue's targets (A/A
"regression" <= 1/20 per cell; compute-bound 5% caught >= 18/20; dispatch-bound 10% caught >= 18/20; each
verdict within 10 minutes). Then, from the pairs measured, three more tables:

- an estimate: ab's own judging (``judge_metric`` with the test the verdicts ran, ``--test``: its per-look level
  or t boundaries, the minutes rule) replayed on
  verdicts drawn from the measured pairs (A/A ones with a random label swap: the null the design
  guarantees), and the chance that a set of 20 meets the target;
- what a verdict would need to meet it (pairs and minutes, a normal approximation from the pairs' spread);
- where the noise is: within a process (rounds) and between processes, which says whether more rounds or
  more pairs would help;
- wall-clock throughput against CPU time per output token on the same pairs: which is steadier, and what each
  sees of the injected slowdown.

The full study takes hours and needs a QUIET machine; ``--keep`` makes it resumable (run the same command
again: finished verdicts are kept), and ``--estimate-only`` prints the tables from what is there:

    OMP_NUM_THREADS=1 PYTHONPATH=src python tools/ab_detector.py --keep results/ab-detector
    OMP_NUM_THREADS=1 PYTHONPATH=src python tools/ab_detector.py --keep results/ab-detector --estimate-only
    OMP_NUM_THREADS=1 PYTHONPATH=src python tools/ab_detector.py --aa 2 --slowed 2 --cells dispatch \\
        --max-pairs 2 --alpha 0.6 --rounds 1 --extra "--batchperf-num-prompts 8"   # a smoke test (minutes)

vLLM's two cells (issue 36), resident pairs of 40 rounds (a vLLM process starts in about a minute, a round is
~0.5 s), A/A and a 5% slowdown in the engine core, six real verdicts a row:

    OMP_NUM_THREADS=1 PYTHONPATH=src python tools/ab_detector.py --cells vllm,server --design resident \\
        --rounds 40 --aa 6 --slowed 6 --keep results/ab-detector-vllm
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from batchperf.ab.stats import DEFAULT_TEST, TESTS, SequentialTest, make_test, recorded_test
from batchperf.calibrate.cells import DETECTOR_CELLS  # the detector's cells, shared with the studies of ab
from batchperf.ab.env import Environment, default_checkout
from batchperf.ab.judging import cell_verdict, judge_metric
from batchperf.ab.cell import PairSeries
from batchperf.ab.run import run_ab
from batchperf.ab.settings import DESIGNS, Settings
from batchperf.ab.stats.signed_rank import process_noise, relative
from batchperf.backends.inject import ENV_SLOWDOWN
from batchperf.measure.catalogue import by_name
from batchperf.regress.verdict import Verdict
from batchperf.results.io import read_results
from batchperf.results.record import CellRecord
from batchperf.telemetry.sampler import summarise_telemetry

CPU_PER_TOKEN = "cpu_seconds_per_output_token"
AA_TARGET = 1  # of 20: A/A verdicts allowed to say regression
MINUTES_TARGET = 10.0


@dataclass(frozen=True)
class Score:
    verdict: str
    pairs: int
    minutes: float
    width: float | None  # the deciding metric's final interval width (B/A - 1), None when unbounded
    estimate: float | None


def score(doc: dict, metric: str) -> Score:
    """A verdict's score from its ``ab.json`` (what ``AbResult.to_dict`` writes): one cell, one deciding metric."""
    (cell,) = doc["cells"]
    m = next((x for x in cell["metrics"] if x["metric"] == metric), {})
    low, high, estimate = m.get("low"), m.get("high"), m.get("estimate")
    width = high - low if low is not None and high is not None and math.isfinite(high - low) else None
    return Score(cell["verdict"], len(doc["pairs"]), doc["elapsed_s"] / 60, width, estimate)


def finished(folder: Path) -> dict | None:
    """A kept verdict's ``ab.json`` when it ran to its end (done or budget), so a rerun resumes after it."""
    try:
        doc = json.loads((folder / "ab.json").read_text())
    except (OSError, ValueError):
        return None
    return doc if doc.get("status") in ("done", "budget") else None


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def row_head(kind: str, slowdown: float) -> str:
    """The first two cells of a table row: the cell kind and how much B was slowed."""
    return f"| {DETECTOR_CELLS[kind].name} | {slowdown:.0%}{' (A/A)' if not slowdown else ''} |"


def target_of(kind: str, slowdown: float) -> str:
    wanted = f"regression <= {AA_TARGET}/20" if not slowdown else f"regression >= {DETECTOR_CELLS[kind].target}/20"
    return f"{wanted}, each <= {MINUTES_TARGET:g} min"


def table(rows: dict[tuple[str, float], list[Score]]) -> str:
    lines = [("| cell | B slowed by | verdicts | regression | no change | inconclusive | other | median pairs "
              "| median minutes (max) | median interval width | median estimate | target |"),
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for (kind, slowdown), scores in rows.items():
        n = len(scores)
        count = {v: sum(s.verdict == v for s in scores) for v in ("regression", "no change", "inconclusive")}
        other = n - sum(count.values())
        minutes = [s.minutes for s in scores]
        lines.append(
            f"{row_head(kind, slowdown)} {n} | {count['regression']} "
            f"({count['regression'] / n:.0%}) | {count['no change']} | {count['inconclusive']} | {other} "
            f"| {fmt(median([s.pairs for s in scores]), '.0f')} | {fmt(median(minutes), '.1f')} ({max(minutes):.1f}) "
            f"| {fmt(median([s.width for s in scores if s.width is not None]), '.1%')} "
            f"| {fmt(median([s.estimate for s in scores if s.estimate is not None]), '+.1%')} "
            f"| {target_of(kind, slowdown)} |")
    return "\n".join(lines)


# --- the estimate: ab's own judging, replayed on pairs resampled from the verdicts measured -----------------------


@dataclass(frozen=True)
class Bank:
    """Every finished verdict's measured pairs of one (kind, slowdown), for resampling."""

    pairs: list[tuple[float, float, float]]  # (A's value, B's value, seconds both processes took)
    overhead_s: float  # per verdict, before and between pairs (probing and collecting the environments)
    settings: dict  # ab's settings, as ab.json records them
    verdicts: int
    exchangeable: bool  # A/A: A and B are the same environment, so a pair is as likely with its labels swapped


def pair_seconds(pair: dict, design: str) -> float:
    """A pair's wall seconds: its two processes one after the other, or (resident) at once."""
    sides = [pair[label]["seconds"] for label in pair["order"]]
    return max(sides) if design == "resident" else sum(sides)


def measured(work: Path) -> dict[tuple[str, float], list[dict]]:
    """(kind, slowdown) -> the ``ab.json`` of every finished verdict folder ``KIND-SLOWDOWN-NN`` under ``work``."""
    found: dict[tuple[str, float], list[dict]] = {}
    for folder in sorted(work.iterdir()):
        kind, _, rest = folder.name.partition("-")
        slowdown, _, index = rest.partition("-")
        if kind in DETECTOR_CELLS and index.isdigit() and (doc := finished(folder)) is not None:
            doc["folder"] = str(folder)  # where its pairs' results files are, wherever the study was moved
            found.setdefault((kind, float(slowdown)), []).append(doc)
    return found


def banks(work: Path, metric: str) -> dict[tuple[str, float], Bank]:
    """(kind, slowdown) -> the pairs of every finished verdict under ``work``."""
    found = measured(work)
    out = {}
    for key, docs in found.items():
        pairs, overheads = [], []
        for doc in docs:
            (cell,) = doc["cells"]
            m = next(x for x in cell["metrics"] if x["metric"] == metric)
            seconds = [pair_seconds(p, doc["settings"].get("design", "sequential")) for p in doc["pairs"]]
            pairs += list(zip(m["a"], m["b"], seconds))
            overheads.append(doc["elapsed_s"] - sum(seconds))
        out[key] = Bank(pairs, statistics.median(overheads), docs[0]["settings"], len(docs), exchangeable=not key[1])
    return out


def judge_for(bank: Bank, test: str | None) -> SequentialTest:
    """The test the bank's verdicts ran with, or ``test`` made for their budget and alpha (one cell: alpha over the
    deciding metrics), to ask what the other test would have said on the same measured pairs."""
    s = bank.settings
    if test is None or test == s.get("test", "signed-rank"):
        return recorded_test(s)
    return make_test(test, s["max_pairs"], s["alpha"] / len(s["metrics"]))


def replay(bank: Bank, metric: str, rng: np.random.Generator, test: str | None = None) -> Score:
    """One verdict as ``ab`` reaches it (its judging code, its budget rule) on pairs drawn from the bank.

    A/A banks are drawn with a random label swap: a few dozen measured pairs have a median B/A off 1 by chance
    (or by drift), and resampling them as they are would score that chance offset as the detector's false alarms.
    """
    s = bank.settings
    result = PairSeries(metric, by_name(metric).direction, True, s["margin"])
    judge = judge_for(bank, test)  # by default the test the measured verdicts ran with, at their level or boundaries
    elapsed, spent = bank.overhead_s, []
    while len(spent) < s["max_pairs"]:
        if spent and elapsed + statistics.mean(spent) > s["max_minutes"] * 60:
            break
        a, b, seconds = bank.pairs[rng.integers(len(bank.pairs))]
        if bank.exchangeable and rng.random() < 0.5:  # the null the design guarantees, not this sample's drift
            a, b = b, a
        result.a.append(a)
        result.b.append(b)
        spent.append(seconds)
        elapsed += seconds
        judge_metric(result, judge)
        if result.call is not Verdict.INCONCLUSIVE:
            break
    iv = result.interval
    width = iv.width if iv is not None and math.isfinite(iv.width) else None
    return Score(cell_verdict([result]).value, len(spent), elapsed / 60, width,
                 relative(iv.estimate) if iv is not None else None)


def estimate(work: Path, metric: str, verdicts: int, seed: int = 1, test: str | None = None) -> str:
    """A table of rates from ``verdicts`` resampled verdicts per (kind, slowdown), and the chance a set of 20
    meets the issue's target."""
    from scipy import stats

    rng = np.random.default_rng(seed)
    lines = [("| cell | B slowed by | pairs measured (verdicts) | resampled verdicts | regression | no change "
              "| improvement | inconclusive | median pairs | median minutes | P(a set of 20 meets the target) |"),
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for (kind, slowdown), bank in sorted(banks(work, metric).items()):
        scores = [replay(bank, metric, rng, test) for _ in range(verdicts)]
        rate = {v: sum(x.verdict == v for x in scores) / verdicts
                for v in ("regression", "no change", "improvement", "inconclusive")}
        meets = (stats.binom.cdf(AA_TARGET, 20, rate["regression"]) if not slowdown
                 else stats.binom.sf(DETECTOR_CELLS[kind].target - 1, 20, rate["regression"]))
        lines.append(f"{row_head(kind, slowdown)} "
                     f"{len(bank.pairs)} ({bank.verdicts}) | {verdicts} | {rate['regression']:.1%} "
                     f"| {rate['no change']:.1%} | {rate['improvement']:.1%} | {rate['inconclusive']:.1%} "
                     f"| {median([x.pairs for x in scores]):.0f} | {median([x.minutes for x in scores]):.1f} "
                     f"| {meets:.2f} |")
    return "\n".join(lines)


def needed(work: Path, metric: str, alpha: float, power: float = 0.9) -> str:
    """What the budget would have to buy, from the measured pairs' spread (a normal approximation).

    One fixed-size signed-rank test (no peeking: the sequential design needs more) at two-sided ``alpha`` with
    ``power`` against the injected slowdown's nominal effect ln(1 + slowdown) (an upper bound of its effect
    on throughput, so these are lower bounds): n = ((z(1 - alpha/2) + z(power)) * sd / effect)^2 * pi/3, the
    last factor the signed-rank test's efficiency against the t-test under normal noise. For A/A rows: the
    pairs whose interval would fit inside ±margin when nothing changed.
    """
    from scipy import stats

    z_a, z_b = stats.norm.ppf(1 - alpha / 2), stats.norm.ppf(power)
    lines = [("| cell | B slowed by | pairs measured | sd of ln(B/A) per pair | median B/A | seconds a pair "
              "| pairs needed | minutes needed |"), "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for (kind, slowdown), bank in sorted(banks(work, metric).items()):
        logs = [math.log(b / a) for a, b, _ in bank.pairs]
        sd = statistics.stdev(logs) if len(logs) > 1 else math.nan
        seconds = statistics.mean(x for _, _, x in bank.pairs)
        if slowdown:
            n = ((z_a + z_b) * sd / math.log1p(slowdown)) ** 2 * math.pi / 3
        else:
            n = (z_a * sd / bank.settings["margin"]) ** 2 * math.pi / 3
        if math.isnan(n):  # one pair has no spread: nothing to say what more would need (seen: budget stops)
            lines.append(f"{row_head(kind, slowdown)} {len(logs)} | - | {math.exp(statistics.median(logs)):.3f} "
                         f"| {seconds:.0f} | - | - |")
            continue
        lines.append(f"{row_head(kind, slowdown)} {len(logs)} "
                     f"| {sd:.3f} | {math.exp(statistics.median(logs)):.3f} | {seconds:.0f} | {math.ceil(n)} "
                     f"| {(bank.overhead_s + n * seconds) / 60:.0f} |")
    return "\n".join(lines)


def results_files(doc: dict, pair: dict) -> dict[str, Path]:
    """A pair's results file per side, in its verdict's folder (wherever the study was moved)."""
    return {label: Path(doc["folder"]) / Path(pair[label]["results"]).name for label in pair["order"]}


def process_pairs(work: Path) -> dict[tuple[str, float], list[dict[str, CellRecord]]]:
    """(kind, slowdown) -> every measured pair of its finished verdicts, as {label: that process's record}."""
    out: dict[tuple[str, float], list[dict[str, CellRecord]]] = {}
    for key, docs in sorted(measured(work).items()):
        for doc in docs:
            (cell,) = doc["cells"]
            for pair in doc["pairs"]:
                paths = results_files(doc, pair)
                if not all(path.exists() for path in paths.values()):  # kept without them: see without_results()
                    continue
                sides = {label: next(r for r in read_results(path).records if r.id == cell["id"])
                         for label, path in paths.items()}
                out.setdefault(key, []).append(sides)
    return out


def without_results(work: Path) -> int:
    """How many finished verdicts lack their pairs' results files (a study kept in the repository with its
    ``ab.json`` files alone): the verdict table and the estimate come from ``ab.json``; the noise and the wall/CPU
    tables, which need every round, leave those verdicts out."""
    return sum(1 for docs in measured(work).values() for doc in docs
               if not all(path.exists() for pair in doc["pairs"] for path in results_files(doc, pair).values()))


def noise(work: Path, metric: str) -> str:
    """Where the noise is: the spread of rounds within a process, and of processes beyond what their rounds explain
    (:class:`batchperf.ab.stats.signed_rank.ProcessNoise`, from every measured process's per-round values, its results file).
    More rounds shrink only the first. The predicted pair sd summarises a process by its mean round (ab takes the
    median round, the record's metric, which is a little noisier).
    """
    lines = [("| cell | B slowed by | processes x rounds | within a process (a round) | between processes "
              "| predicted pair sd at 3 / 10 / 30 rounds |"), "|---|---:|---:|---:|---:|---:|"]
    for (kind, slowdown), records in process_pairs(work).items():
        pairs = [{label: [r[metric] for r in record.rounds] for label, record in sides.items()} for sides in records]
        if (found := process_noise(pairs)) is None:
            continue
        pair_sd = "/".join(f"{found.predicted_pair_sd(r):.3f}" for r in (3, 10, 30))
        lines.append(f"{row_head(kind, slowdown)} {found.processes} x {found.rounds:g} | {found.within:.3f} "
                     f"| {found.process:.3f} | {pair_sd} |")
    return "\n".join(lines)


def wall_and_cpu(work: Path) -> str:
    """Wall-clock throughput against CPU seconds per output token, on the same pairs: is CPU time the steadier
    yardstick (issue 25: make it a deciding metric only if it is)?

    Each process is summarised as a cell is (``batchperf.suite.cell``): the median of its rounds' throughput and
    of its rounds' CPU time per token (``summarise_telemetry`` of the rounds' telemetry, in the traces), and for
    comparison the one round's CPU figure a record kept before that (its last round). Per row: the mean and sd
    over pairs of the change each shows, as "B worse than A" on the log scale (throughput ln(A/B), CPU per
    token ln(B/A)). An A/A row's sd is the steadiness; a slowed row's mean says what each sees of the injected
    slowdown: a wait (``batchperf.backends.inject.wait``) that sleeps all but its last 2 ms and spins those, so
    CPU time sees only the spun part (all of a short wait; before 2026-12-04 the wait was a sleep, which CPU time
    could not see: the "wait" label of ``batchperf.regress.cell_notes``).
    """
    lines = [("| cell | B slowed by | pairs | throughput: B worse by, mean (sd) | CPU s per token, median of rounds "
              "| CPU s per token, last round only |"), "|---|---:|---:|---:|---:|---:|"]
    for (kind, slowdown), records in process_pairs(work).items():
        changes = []
        for sides in records:
            if len(sides) != 2:
                continue
            a, b = (sides[label] for label in ("A", "B"))
            cpu = [summarise_telemetry([t.get("telemetry") or {} for t in r.traces]).get(CPU_PER_TOKEN) for r in (a, b)]
            last = [r.traces[-1].get("telemetry", {}).get(CPU_PER_TOKEN) if r.traces else None for r in (a, b)]
            if None in cpu or None in last:
                continue
            changes.append((math.log(a.metrics["output_throughput"] / b.metrics["output_throughput"]),
                            math.log(cpu[1] / cpu[0]), math.log(last[1] / last[0])))
        if len(changes) < 3:
            continue
        cols = " | ".join(f"{statistics.mean(c):+.3f} ({statistics.stdev(c):.3f})" for c in zip(*changes))
        lines.append(f"{row_head(kind, slowdown)} {len(changes)} | {cols} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--aa", type=int, default=20, help="A/A verdicts per cell (default 20)")
    parser.add_argument("--slowed", type=int, default=20, help="verdicts per cell with B slowed (default 20)")
    parser.add_argument("--cells", default="compute,dispatch", help=f"cell kinds, of {', '.join(DETECTOR_CELLS)} (default both)")
    parser.add_argument("--slowdown", action="append", default=[], metavar="KIND=FRAC",
                        help="override a kind's injected slowdown, e.g. dispatch=0.2")
    parser.add_argument("--metrics", default="output_throughput", help="deciding metrics (default output_throughput)")
    parser.add_argument("--margin", type=float, default=0.03, help="equivalence margin (default 0.03)")
    parser.add_argument("--alpha", type=float, default=0.05, help="ab's false-alarm rate per verdict (default 0.05)")
    parser.add_argument("--max-pairs", type=int, default=14,
                        help="ab's budget of pairs per verdict (default 14: about what 10 minutes buy here)")
    parser.add_argument("--max-minutes", type=float, default=MINUTES_TARGET,
                        help=f"ab's budget of minutes per verdict (default {MINUTES_TARGET:g}, the target)")
    parser.add_argument("--rounds", type=int, default=3, help="measured rounds per process (default 3)")
    parser.add_argument("--test", choices=TESTS, default=DEFAULT_TEST,
                        help=f"ab's test (default {DEFAULT_TEST}); the estimate replays the one the verdicts "
                             "ran with")
    parser.add_argument("--design", choices=DESIGNS, default="sequential",
                        help="ab's design (default sequential): 'resident' runs each pair's two processes at once, "
                             "in turns round by round")
    parser.add_argument("--extra", default="", metavar="ARGS",
                        help="more pytest arguments for every process, e.g. '--batchperf-num-prompts 8' (smoke runs)")
    parser.add_argument("--keep-servers", action="store_true",
                        help="ab --keep-servers: each side's vllm-server started once a verdict (docs/ab.md)")
    parser.add_argument("--keep", type=Path, default=None,
                        help="keep every verdict's folder here; run again with the same folder to resume (finished "
                             "verdicts are kept, an unfinished one is set aside and measured again)")
    parser.add_argument("--estimate", type=int, default=2000, metavar="N",
                        help="after the verdicts, replay ab's judging on N verdicts' worth of pairs resampled from "
                             "those measured (default 2000; 0: no estimate)")
    parser.add_argument("--estimate-test", action="append", default=[], choices=TESTS,
                        help="also replay the measured pairs with this test (repeatable): which test resolves "
                             "sooner on this machine's own pairs")
    parser.add_argument("--estimate-only", action="store_true",
                        help="measure nothing: print the table and the estimate from the verdicts in --keep")
    args = parser.parse_args()
    kinds = [k.strip() for k in args.cells.split(",") if k.strip()]
    if unknown := [k for k in kinds if k not in DETECTOR_CELLS]:
        parser.error(f"unknown cell kind(s) {unknown}; known: {', '.join(DETECTOR_CELLS)}")
    if args.estimate_only and args.keep is None:
        parser.error("--estimate-only reads the verdicts in --keep DIR; give it")
    work = args.keep or Path(tempfile.mkdtemp(prefix="batchperf-ab-detector-"))
    work.mkdir(parents=True, exist_ok=True)
    metrics = tuple(m.strip() for m in args.metrics.split(",") if m.strip())
    if args.estimate_only:
        rows = {key: [score(doc, metrics[0]) for doc in docs] for key, docs in sorted(measured(work).items())}
    else:
        rows = measure(args, kinds, work, metrics)
    if not rows:
        print(f"ab_detector: no finished verdict in {work}", file=sys.stderr)
        return 1
    print()
    print(table(rows))
    first = next(iter(measured(work).values()))[0]["settings"]
    print(f"\nsettings: alpha {first['alpha']}, margin ±{first['margin']:.0%}, deciding {', '.join(first['metrics'])}, "
          f"at most {first['max_pairs']} pairs / {first['max_minutes']:g} min per verdict, {first['rounds']} rounds per "
          f"process ({recorded_test(first).describe()}); every verdict's files in {work}")
    if args.estimate:
        print(f"\nestimate: ab's judging replayed on {args.estimate} verdicts per row, each drawing pairs (with "
              "replacement) from that row's measured pairs, under the budget those verdicts ran with:\n")
        for test in [None, *args.estimate_test]:
            if test is not None:
                print(f"\nthe same estimate, judged with --test {test} instead (same pairs, budget and alpha):\n")
            print(estimate(work, metrics[0], args.estimate, test=test))
        print(f"\nwhat a verdict would need (alpha {first['alpha']}, 90% power, normal approximation from the "
              "measured pairs; see needed()):\n")
        print(needed(work, metrics[0], first["alpha"]))
        if lacking := without_results(work):
            print(f"\n{lacking} verdict(s) kept without their pairs' results files: left out of the two tables below")
        print("\nwhere the noise is (sd of ln(value); see noise()):\n")
        print(noise(work, metrics[0]))
        print("\nwall-clock throughput against CPU time per output token, the same pairs (see wall_and_cpu()):\n")
        print(wall_and_cpu(work))
    return 0 if all(s.verdict != Verdict.FAILED.value for v in rows.values() for s in v) else 1


def measure(args: argparse.Namespace, kinds: list[str], work: Path, metrics: tuple[str, ...]) -> dict[tuple[str, float], list[Score]]:
    """Run (or resume) the planned verdicts, printing a line each; (kind, slowdown) -> their scores."""
    overrides = {k: float(v) for k, _, v in (s.partition("=") for s in args.slowdown)}
    here = default_checkout()
    python = Path(sys.executable)
    plan = [(kind, 0.0, i) for kind in kinds for i in range(args.aa)]
    plan += [(kind, overrides.get(kind, DETECTOR_CELLS[kind].slowdown), i) for kind in kinds for i in range(args.slowed)]
    plan.sort(key=lambda p: (p[2], p[0], p[1]))  # interleave kinds and A/A vs slowed, so drift hits all alike
    rows: dict[tuple[str, float], list[Score]] = {}
    started = time.monotonic()
    for n, (kind, slowdown, i) in enumerate(plan, 1):
        b_vars = ((ENV_SLOWDOWN, str(slowdown)),) if slowdown else ()
        settings = Settings(Environment("A", python, dir=here), Environment("B", python, b_vars, here),
                            (*DETECTOR_CELLS[kind].selection, *shlex.split(args.extra)), work / f"{kind}-{slowdown:g}-{i:02d}",
                            margin=args.margin, metrics=metrics, alpha=args.alpha, max_pairs=args.max_pairs,
                            max_minutes=args.max_minutes, rounds=args.rounds, test=args.test,
                            design=args.design, keep_servers=args.keep_servers)
        doc, status, reason = finished(settings.out), "kept", ""
        wanted = {"margin": settings.margin, "metrics": list(metrics), "alpha": settings.alpha, "rounds": settings.rounds,
                  "max_pairs": settings.max_pairs, "max_minutes": settings.max_minutes, "test": settings.test,
                  "design": settings.design, "keep_servers": settings.keep_servers,
                  "pytest_args": list(settings.pytest_args)}
        old = {"test": "signed-rank", "design": "sequential", "keep_servers": False}  # before those options existed
        recorded = {**old, **doc["settings"]} if doc is not None else {}
        if doc is not None and (differ := [k for k, v in wanted.items() if recorded[k] != v]):
            sys.exit(f"ab_detector: {settings.out} was measured with other settings ({', '.join(differ)}); "
                     "give the same options to resume it, or another --keep folder")
        if doc is None:
            if settings.out.exists():  # an unfinished verdict (interrupted, failed): set aside, measured again
                shutil.move(settings.out, settings.out.with_name(f"{settings.out.name}.unfinished-{int(time.time())}"))
            try:
                result = run_ab(settings, progress=lambda line: print(f"    {line}", flush=True))  # a pair a line
            except KeyboardInterrupt:  # before the verdict's first pair (probing the environments): nothing of it kept
                print(f"ab_detector: interrupted before {settings.out.name}'s first pair; the finished verdicts are "
                      f"in {work}: give the same command to resume", file=sys.stderr)
                break
            doc, status, reason = result.to_dict(), result.status, result.reason
        s = score(doc, metrics[0])
        rows.setdefault((kind, slowdown), []).append(s)
        load = doc["load_avg_1m"]
        print(f"[{n}/{len(plan)}] {kind} slowdown {slowdown:.0%} #{i + 1}: {s.verdict} after {s.pairs} pair(s), "
              f"{s.minutes:.1f} min; {metrics[0]} {fmt(s.estimate, '+.1%')} width {fmt(s.width, '.1%')}; "
              f"load {fmt(load['median'] if load else None, '.2f')}{' (kept from an earlier run)' if status == 'kept' else ''}"
              f"  [{(time.monotonic() - started) / 60:.0f} min]", flush=True)
        (work / "scores.json").write_text(json.dumps(
            {f"{k}|{sl}": [vars(x) for x in v] for (k, sl), v in rows.items()}, indent=1))
        if status in ("interrupted", "failed"):
            print(f"ab_detector: stopping, the verdict {status}: {reason}", file=sys.stderr)
            break
    return rows

if __name__ == "__main__":
    sys.exit(main())
