"""A pair's B/A round-paired (``batchperf.ab.cell.round_paired``, docs/ab.md "Round-paired pairs"): the median of
the two sides' i-th rounds' ratios, which a drift both sides saw divides out of; the ratio of medians where the rounds
do not pair; the records' rounds read only when they are the ones the figure was taken from; ``ab.json`` and the
detector's replay keep what was judged."""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from paths import DATA

from batchperf.ab.cell import CellState, PairSeries, round_paired
from batchperf.ab.env import Environment
from batchperf.ab.judging import add_pair, judge_cell, judge_metric
from batchperf.ab.settings import Settings
from batchperf.ab.stats import make_test
from batchperf.calibrate.replay import banks
from batchperf.measure.catalogue import Direction
from batchperf.regress.verdict import Verdict
from batchperf.results.io import read_results

RECORD = read_results(DATA / "results_cpu_small.json").records[0]
TPUT = "output_throughput"


def settings() -> Settings:
    return Settings(Environment("A", Path("/py/a")), Environment("B", Path("/py/b")), (), Path("/tmp/ab"))


def with_rounds(values: list[float]) -> object:
    """RECORD with its throughput rounds set to ``values`` and its figure to their median, as a real record is."""
    rounds = [{**RECORD.rounds[0], TPUT: v} for v in values]
    return replace(RECORD, rounds=rounds, metrics={**RECORD.metrics, TPUT: statistics.median(values)})


def test_round_paired_is_the_median_of_the_rounds_log_ratios() -> None:
    assert round_paired([100.0, 200.0, 50.0], [110.0, 180.0, 60.0]) == pytest.approx(
        statistics.median([math.log(1.1), math.log(0.9), math.log(1.2)]))
    assert round_paired([1.0, 2.0], [1.0]) is None  # different numbers of rounds: nothing pairs
    assert round_paired(None, [1.0]) is None and round_paired([], []) is None


def test_a_drift_both_sides_saw_divides_out_of_the_round_paired_ratio() -> None:
    """B 5% slower in every round, the machine drifting 30% within the pair, and B's rounds falling where the machine
    was slow more often than A's: the ratio of medians is thrown off, the round-paired one reads exactly -5%."""
    drift = [1.0, 1.3, 0.8, 1.25, 0.75, 1.2, 0.9]
    a = [100.0 * d for d in drift]
    b = [95.0 * d * (0.7 if i in (1, 3) else 1.0) for i, d in enumerate(drift)]  # two of B's rounds hit by a neighbour
    b_same = [95.0 * d for d in drift]
    assert round_paired(a, b_same) == pytest.approx(math.log(0.95))
    assert round_paired(a, b) == pytest.approx(math.log(0.95))
    assert math.log(statistics.median(b) / statistics.median(a)) < math.log(0.95) - 0.04


def test_a_record_s_rounds_are_read_only_when_they_give_its_figure() -> None:
    assert RECORD.round_values(f"metrics.{TPUT}") == [r[TPUT] for r in RECORD.rounds]
    edited = replace(RECORD, metrics={**RECORD.metrics, TPUT: 1.0})  # the figure no longer the rounds' median
    assert edited.round_values(f"metrics.{TPUT}") is None
    assert RECORD.round_values("kv.kv_bytes_per_request_mean") is None  # not a per-round figure
    zero = replace(RECORD, rounds=[{**r, TPUT: 0.0} for r in RECORD.rounds])
    assert zero.round_values(f"metrics.{TPUT}") is None  # no logarithm of 0


def test_a_pair_is_judged_round_paired_and_ab_json_keeps_both() -> None:
    cell = CellState("c", "n")
    drift = [1.0, 1.3, 0.8, 1.25, 0.75]
    for index in range(1, 9):
        a = with_rounds([100.0 * d for d in drift])
        # B 5% slower; in odd pairs its slowest rounds fall where A's fastest did, which the medians confuse
        b_drift = drift if index % 2 == 0 else [1.0, 0.8, 1.3, 0.75, 1.25]
        b = with_rounds([95.0 * d * (d2 / d if index % 2 else 1.0) for d, d2 in zip(drift, b_drift)])
        add_pair(cell, settings(), a, b, index)
    series = cell.metrics[TPUT]
    assert len(series.paired) == len(series.a) == 8
    assert all(p is not None for p in series.paired)
    judge_cell(cell, make_test("signed-rank", 8, 0.05), 8)
    assert series.call is Verdict.REGRESSION
    assert series.interval is not None and math.isfinite(series.interval.estimate)
    written = series.to_dict()
    assert written["a"] == series.a and written["b"] == series.b  # the processes' medians, as before
    assert written["paired_ratios"] == pytest.approx([math.exp(p) for p in series.paired])
    json.dumps(written)


def test_pairs_whose_rounds_do_not_pair_are_judged_on_their_medians() -> None:
    series = PairSeries(TPUT, Direction.HIGHER, True, 0.03, a=[100.0, 100.0, 100.0], b=[90.0, 95.0, 80.0],
                        paired=[math.log(0.5), None])  # the third pair has no entry at all
    assert series.log_ratios == pytest.approx([math.log(0.5), math.log(0.95), math.log(0.8)])
    assert "paired_ratios" in series.to_dict()
    assert "paired_ratios" not in PairSeries(TPUT, Direction.HIGHER, True, 0.03, a=[1.0], b=[1.0],
                                             paired=[None]).to_dict()


def test_an_a_a_of_exchangeable_sides_stays_within_alpha_round_paired() -> None:
    """A/A pairs whose rounds share a strong drift and have their own noise: the round-paired ln(B/A) is symmetric
    about 0, so the signed-rank test's false-alarm rate, looking after every pair, stays within alpha (8 pairs,
    alpha 0.05, 800 runs)."""
    rng = np.random.default_rng(3)
    test = make_test("signed-rank", 8, 0.05)
    calls = 0
    for _ in range(800):
        series = PairSeries(TPUT, Direction.HIGHER, True, 0.03)
        for _ in range(8):
            drift = np.exp(rng.normal(0, 0.3, 5))
            a, b = (list(100.0 * drift * np.exp(rng.normal(0, 0.05, 5))) for _ in "AB")
            series.a.append(statistics.median(a))
            series.b.append(statistics.median(b))
            series.paired.append(round_paired(a, b))
            judge_metric(series, test)
            if series.call is not Verdict.INCONCLUSIVE:
                break
        calls += series.call in (Verdict.REGRESSION, Verdict.IMPROVEMENT)
    assert calls / 800 <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / 800)


def test_the_replay_judges_a_pair_the_way_it_was_judged(tmp_path: Path) -> None:
    folder = tmp_path / "compute-0.05-00"
    folder.mkdir()
    pairs = [{"index": i, "order": ["A", "B"], "A": {"seconds": 10.0}, "B": {"seconds": 10.0}} for i in (1, 2)]
    metric = {"metric": TPUT, "a": [100.0, 100.0], "b": [100.0, 90.0], "paired_ratios": [0.95, None]}
    doc = {"batchperf_ab": 1, "status": "done", "elapsed_s": 30.0, "settings": {"design": "resident"},
           "pairs": pairs, "cells": [{"metrics": [metric]}]}
    (folder / "ab.json").write_text(json.dumps(doc))
    (bank,) = banks(tmp_path, TPUT).values()
    assert [(a, b) for a, b, _ in bank.pairs] == [(1.0, 0.95), (100.0, 90.0)]

