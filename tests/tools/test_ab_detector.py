"""tools/ab_detector.py's bookkeeping: scores read back from ab.json, resuming, and the resampled estimate.

The study itself (real processes, hours) is not run here; these check that what it prints is ab's own judging:
a bank of clearly slower pairs is called a regression at the first look that can reject, a budget that buys too
few pairs ends inconclusive, and only finished verdicts are read back.
"""

from __future__ import annotations

import copy
import json
import math
import statistics
from pathlib import Path

import numpy as np
import pytest
from paths import DATA
from tool_module import tool_module

from batchperf.ab.stats.signed_rank import min_pairs, per_look_level

REAL = DATA / "results_cpu_small.json"


@pytest.fixture(scope="module")
def tool():
    with tool_module("ab_detector") as module:
        yield module


def verdict_doc(ratios: list[float], seconds: float, status: str, max_pairs: int = 14, max_minutes: float = 10.0) -> dict:
    """An ab.json as ``AbResult.to_dict`` writes it, for one cell deciding on output_throughput."""
    level, _ = per_look_level(max_pairs, 0.05)
    a = [100.0] * len(ratios)
    b = [100.0 * r for r in ratios]
    return {
        "status": status, "elapsed_s": 20.0 + seconds * len(ratios), "load_avg_1m": None,
        "settings": {"margin": 0.03, "metrics": ["output_throughput"], "alpha": 0.05, "per_look_level": level,
                     "max_pairs": max_pairs, "max_minutes": max_minutes, "rounds": 3, "pytest_args": []},
        "pairs": [{"order": ["A", "B"], "A": {"seconds": seconds / 2}, "B": {"seconds": seconds / 2}} for _ in ratios],
        "cells": [{"verdict": "regression", "metrics": [
            {"metric": "output_throughput", "a": a, "b": b, "estimate": -0.1, "low": -0.2, "high": -0.05}]}],
    }


def keep(folder: Path, doc: dict) -> None:
    folder.mkdir(parents=True)
    (folder / "ab.json").write_text(json.dumps(doc))


def test_score_and_resume_read_only_finished_verdicts(tool, tmp_path: Path) -> None:
    keep(tmp_path / "dispatch-0.1-00", verdict_doc([0.9] * 8, 50.0, "done"))
    keep(tmp_path / "dispatch-0.1-01", verdict_doc([0.9] * 3, 50.0, "interrupted"))
    keep(tmp_path / "dispatch-0.1-00.unfinished-1", verdict_doc([0.9] * 3, 50.0, "done"))  # set aside: not read
    found = tool.measured(tmp_path)
    assert list(found) == [("dispatch", 0.1)] and len(found[("dispatch", 0.1)]) == 1
    s = tool.score(found[("dispatch", 0.1)][0], "output_throughput")
    assert (s.verdict, s.pairs, s.estimate) == ("regression", 8, -0.1)
    assert s.width == pytest.approx(0.15) and s.minutes == pytest.approx((20 + 400) / 60)
    assert tool.finished(tmp_path / "dispatch-0.1-01") is None


def test_replay_is_abs_judging_on_resampled_pairs(tool, tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    slower = [0.88 + 0.01 * (i % 5) for i in range(20)]  # every pair 8-12% slower in B
    keep(tmp_path / "compute-0.05-00", verdict_doc(slower, 50.0, "done"))  # not exchangeable: never swapped
    bank = tool.banks(tmp_path, "output_throughput")[("compute", 0.05)]
    assert len(bank.pairs) == 20 and bank.overhead_s == pytest.approx(20.0)
    s = tool.replay(bank, "output_throughput", rng)
    level = bank.settings["per_look_level"]
    assert s.verdict == "regression" and s.pairs == min_pairs(level)  # the first look that can reject
    assert -0.12 <= s.estimate <= -0.08 and math.isfinite(s.width)


def test_replay_stops_at_the_minutes_budget(tool, tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    keep(tmp_path / "dispatch-0.1-00", verdict_doc([0.8, 1.2] * 5, 150.0, "budget"))  # 2.5 min a pair
    bank = tool.banks(tmp_path, "output_throughput")[("dispatch", 0.1)]
    s = tool.replay(bank, "output_throughput", rng)
    assert s.verdict == "inconclusive" and s.pairs == 3  # 20 s + 3 x 150 s; a fourth would pass 10 minutes
    table = tool.estimate(tmp_path, "output_throughput", 20)
    assert "| 10 (1) | 20 | 0.0% | 0.0% | 0.0% | 100.0% | 3 |" in table


def test_what_a_verdict_would_need_says_nothing_of_a_row_with_one_pair(tool, tmp_path: Path) -> None:
    """A row whose verdicts stopped after one pair (a budget that cannot hold the pairs a verdict needs) has no
    spread to size a verdict from: its row says so instead of the whole report failing (seen: a NaN crash)."""
    keep(tmp_path / "server-0-00", verdict_doc([1.01], 138.0, "budget"))
    keep(tmp_path / "vllm-0-00", verdict_doc([1.01, 0.98, 1.0], 80.0, "done"))
    rows = tool.needed(tmp_path, "output_throughput", 0.05).splitlines()
    [server] = [r for r in rows if r.startswith("| vLLM server")]
    assert server.endswith("| 1 | - | 1.010 | 138 | - | - |")
    [engine] = [r for r in rows if r.startswith("| vLLM engine")]
    assert "| - |" not in engine and engine.count("|") == 9


def test_verdicts_kept_without_their_results_files_still_give_the_verdict_tables(tool, tmp_path: Path) -> None:
    """A study moved into the repository keeps each verdict's ab.json, not its megabytes of results files: the
    verdicts and the estimate still come from it; the per-round tables leave it out and the count says so."""
    doc = verdict_doc([0.9] * 8, 50.0, "done")
    doc["pairs"] = [{**p, "A": {**p["A"], "results": f"pair-{i:03d}-A.json"},
                     "B": {**p["B"], "results": f"pair-{i:03d}-B.json"}} for i, p in enumerate(doc["pairs"], 1)]
    keep(tmp_path / "vllm-0.05-00", doc)
    assert tool.process_pairs(tmp_path) == {} and tool.without_results(tmp_path) == 1
    assert tool.noise(tmp_path, "output_throughput").count("\n") == 1  # the header alone
    assert "| 8 (1) |" in tool.estimate(tmp_path, "output_throughput", 20)


def test_aa_banks_are_drawn_with_labels_swapped(tool, tmp_path: Path) -> None:
    """A/A pairs whose sample happens to sit 10% off: drawn as they are, a 'regression' every time; with the
    label swap the A/A design guarantees, the signed-rank signs are fair coins and false alarms stay under alpha."""
    rng = np.random.default_rng(1)
    off = [0.9] * 8
    keep(tmp_path / "dispatch-0-00", verdict_doc(off, 10.0, "budget", max_pairs=8))
    keep(tmp_path / "dispatch-0.1-00", verdict_doc(off, 10.0, "done", max_pairs=8))
    found = tool.banks(tmp_path, "output_throughput")
    aa, slowed = found[("dispatch", 0.0)], found[("dispatch", 0.1)]
    assert aa.exchangeable and not slowed.exchangeable
    assert {tool.replay(slowed, "output_throughput", rng).verdict for _ in range(5)} == {"regression"}
    alarms = sum(tool.replay(aa, "output_throughput", rng).verdict == "regression" for _ in range(100))
    assert alarms <= 10  # P(regression) <= alpha / 2 = 2.5% by the per-look level; 10 of 100 is far beyond chance


def test_replay_judges_with_the_test_the_verdicts_ran(tool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Verdicts run with --test t record their boundaries; the replay uses them, not the signed-rank level: a
    steady 10% slowdown is called at the t-test's first look that can decide (sooner than signed-rank's)."""
    monkeypatch.setenv("BATCHPERF_CACHE", str(tmp_path / "cache"))
    from batchperf.ab.stats import make_test

    t = make_test("t", 14, 0.05)
    doc = verdict_doc([0.89 + 0.01 * (i % 3) for i in range(14)], 50.0, "done")
    doc["settings"].update(t.to_dict())
    keep(tmp_path / "compute-0.05-00", doc)
    bank = tool.banks(tmp_path, "output_throughput")[("compute", 0.05)]
    s = tool.replay(bank, "output_throughput", np.random.default_rng(0))
    assert s.verdict == "regression" and s.pairs == t.needs
    assert t.needs < min_pairs(per_look_level(14, 0.05)[0])


def test_the_estimate_can_replay_the_same_pairs_with_the_other_test(tool, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BATCHPERF_CACHE", str(tmp_path / "cache"))
    keep(tmp_path / "compute-0.05-00", verdict_doc([0.89 + 0.01 * (i % 3) for i in range(14)], 50.0, "done"))
    bank = tool.banks(tmp_path, "output_throughput")[("compute", 0.05)]
    assert tool.judge_for(bank, None).test == "signed-rank"  # what the verdicts ran (their ab.json predates --test)
    t = tool.judge_for(bank, "t")
    assert t.test == "t" and len(t.crit) == 14
    s = tool.replay(bank, "output_throughput", np.random.default_rng(0), "t")
    assert s.verdict == "regression" and s.pairs == t.needs


def process_results(path: Path, throughputs: list[float], cpu_per_token: list[float]) -> str:
    """A real CPU-tier results file cut to its first cell, whose rounds had these throughputs and CPU times."""
    data = json.loads(REAL.read_text())
    bench = copy.deepcopy(data["benchmarks"][0])
    info = bench["extra_info"]
    info["rounds"] = [{**info["rounds"][0], "output_throughput": x} for x in throughputs]
    info["metrics"]["output_throughput"] = statistics.median(throughputs)
    info["traces"] = [{**info["traces"][0], "telemetry": {"cpu_seconds_per_output_token": c}} for c in cpu_per_token]
    data["benchmarks"] = [bench]
    path.write_text(json.dumps(data))
    return info["cell"]["id"]


def test_wall_and_cpu_compares_the_two_yardsticks_on_the_same_pairs(tool, tmp_path: Path) -> None:
    """B slept 10% (wall worse, CPU the same): throughput shows it, the CPU time per token, per round's median,
    does not; the last round's CPU figure alone (what records kept before) is the noisier one."""
    folder = tmp_path / "dispatch-0.1-00"
    folder.mkdir()
    pairs, cell = [], None
    for i in range(4):
        wobble = 0.02 * (i % 2)  # only the last round's CPU figure moves between pairs
        sides = {"A": ([100.0, 100.0, 100.0], [1.0, 1.0, 1.0 + 4 * wobble]),
                 "B": ([90.0, 90.0, 90.0], [1.0, 1.0, 1.0 - 4 * wobble])}
        pair = {"order": ["A", "B"] if i % 2 == 0 else ["B", "A"]}
        for label, (wall, cpu) in sides.items():
            path = folder / f"pair-{i:03d}-{label}.json"
            cell = process_results(path, wall, cpu)
            pair[label] = {"results": str(path), "seconds": 10.0}
        pairs.append(pair)
    doc = verdict_doc([0.9] * 4, 20.0, "done")
    doc["pairs"] = pairs
    doc["cells"][0]["id"] = cell
    (folder / "ab.json").write_text(json.dumps(doc))
    row = next(line for line in tool.wall_and_cpu(tmp_path).splitlines() if line.startswith("| dispatch"))
    cols = [c.strip() for c in row.strip("|").split("|")]
    assert cols[2] == "4" and cols[3] == f"{math.log(100 / 90):+.3f} (0.000)"  # throughput: B 10.5% worse
    assert cols[4] == "+0.000 (0.000)"  # the median of the rounds: CPU time cannot see the sleep
    last = [0.0, math.log(0.92 / 1.08)] * 2  # one round's figure wanders
    assert cols[5] == f"{statistics.mean(last):+.3f} ({statistics.stdev(last):.3f})"
    assert "| dispatch" in tool.noise(tmp_path, "output_throughput")  # the same reader feeds the noise table
