"""The detector's estimate: ``ab``'s own judging replayed on verdicts drawn from the pairs the study measured.

A few dozen real verdicts per row give a rate with a wide interval; thousands of replayed ones, each drawing pairs
(with replacement) from that row's measured pairs under the budget those verdicts ran with, give the chance that a
set of 20 meets the target, and what a verdict would need to meet it (:func:`needed`).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from batchperf.ab.cell import PairSeries
from batchperf.ab.judging import cell_verdict, judge_metric
from batchperf.ab.stats import SequentialTest, make_test, recorded_test
from batchperf.ab.stats.signed_rank import relative
from batchperf.calibrate.cells import DETECTOR_CELLS, VERDICTS
from batchperf.calibrate.scores import AA_TARGET, Key, Score, measured, median, row_head
from batchperf.measure.catalogue import by_name
from batchperf.regress.verdict import Verdict


@dataclass(frozen=True, slots=True)
class Bank:
    """Every finished verdict's measured pairs of one (kind, slowdown), for resampling."""

    # (A's value, B's value, seconds both processes took); a pair judged round-paired: (1, its B/A, seconds)
    pairs: list[tuple[float, float, float]]
    overhead_s: float  # per verdict, before and between pairs (probing and collecting the environments)
    settings: dict[str, Any]  # ab's settings, as ab.json records them
    verdicts: int
    exchangeable: bool  # A/A: A and B are the same environment, so a pair is as likely with its labels swapped


def pair_seconds(pair: dict[str, Any], design: str) -> float:
    """A pair's wall seconds: its two processes one after the other, or (resident) at once."""
    sides = [pair[label]["seconds"] for label in pair["order"]]
    return max(sides) if design == "resident" else sum(sides)


def banks(work: Path, metric: str) -> dict[Key, Bank]:
    """(kind, slowdown) -> the pairs of every finished verdict under ``work``."""
    out = {}
    for key, docs in measured(work).items():
        pairs, overheads = [], []
        for doc in docs:
            (cell,) = doc["cells"]
            m = next(x for x in cell["metrics"] if x["metric"] == metric)
            seconds = [pair_seconds(p, doc["settings"].get("design", "sequential")) for p in doc["pairs"]]
            # a pair judged round-paired (batchperf.ab.cell.round_paired) is replayed as its B/A, the way it was judged
            paired = m.get("paired_ratios") or [None] * len(m["a"])
            pairs += [(a, b, s) if r is None else (1.0, r, s) for a, b, r, s in zip(m["a"], m["b"], paired, seconds)]
            overheads.append(doc["elapsed_s"] - sum(seconds))
        out[key] = Bank(pairs, statistics.median(overheads), docs[0]["settings"], len(docs), exchangeable=not key[1])
    return out


def judge_for(bank: Bank, test: str | None) -> SequentialTest:
    """The test the bank's verdicts ran with, or ``test`` made for their budget and alpha (one cell: alpha over the
    deciding metrics), to ask what the other test would have said on the same measured pairs."""
    s = bank.settings
    if test is None or test == s.get("test", "signed-rank"):
        return recorded_test(s)
    return make_test(test, planned_pairs(s), s["alpha"] / len(s["metrics"]))


def planned_pairs(settings: dict[str, Any]) -> int:
    """The pairs a verdict's looks were planned for: those its minutes held (``looks``, batchperf.ab.looks), else
    its ``max_pairs``."""
    return (settings.get("looks") or {}).get("pairs") or settings["max_pairs"]


def replay(bank: Bank, metric: str, rng: np.random.Generator, test: str | None = None) -> Score:
    """One verdict as ``ab`` reaches it (its judging code, its budget rule) on pairs drawn from the bank.

    A/A banks are drawn with a random label swap: a few dozen measured pairs have a median B/A off 1 by chance
    (or by drift), and resampling them as they are would score that chance offset as the detector's false alarms.
    """
    s = bank.settings
    result = PairSeries(metric, by_name(metric).direction, True, s["margin"])
    judge = judge_for(bank, test)  # by default the test the measured verdicts ran with, at their level or boundaries
    elapsed, spent = bank.overhead_s, []
    while len(spent) < planned_pairs(s):
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
        meets = (stats.binom.cdf(AA_TARGET, VERDICTS, rate["regression"]) if not slowdown
                 else stats.binom.sf(DETECTOR_CELLS[kind].target - 1, VERDICTS, rate["regression"]))
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
