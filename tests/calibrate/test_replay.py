"""batchperf.calibrate.replay: what the estimate prints is ab's own judging on resampled pairs.

A bank of clearly slower pairs is called a regression at the first look that can reject, a budget that buys too
few pairs ends inconclusive, A/A banks are drawn with labels swapped, and the test the verdicts ran is replayed.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from detector_samples import keep, verdict_doc

from batchperf.ab.stats import make_test
from batchperf.ab.stats.signed_rank import min_pairs, per_look_level
from batchperf.calibrate.replay import banks, estimate, judge_for, needed, replay


def test_replay_is_abs_judging_on_resampled_pairs(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    slower = [0.88 + 0.01 * (i % 5) for i in range(20)]  # every pair 8-12% slower in B
    keep(tmp_path / "compute-0.05-00", verdict_doc(slower, 50.0, "done"))  # not exchangeable: never swapped
    bank = banks(tmp_path, "output_throughput")[("compute", 0.05)]
    assert len(bank.pairs) == 20 and bank.overhead_s == pytest.approx(20.0)
    s = replay(bank, "output_throughput", rng)
    level = bank.settings["per_look_level"]
    assert s.verdict == "regression" and s.pairs == min_pairs(level)  # the first look that can reject
    assert -0.12 <= s.estimate <= -0.08 and math.isfinite(s.width)


def test_replay_stops_at_the_minutes_budget(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    keep(tmp_path / "dispatch-0.1-00", verdict_doc([0.8, 1.2] * 5, 150.0, "budget"))  # 2.5 min a pair
    bank = banks(tmp_path, "output_throughput")[("dispatch", 0.1)]
    s = replay(bank, "output_throughput", rng)
    assert s.verdict == "inconclusive" and s.pairs == 3  # 20 s + 3 x 150 s; a fourth would pass 10 minutes
    table = estimate(tmp_path, "output_throughput", 20)
    assert "| 10 (1) | 20 | 0.0% | 0.0% | 0.0% | 100.0% | 3 |" in table


def test_what_a_verdict_would_need_says_nothing_of_a_row_with_one_pair(tmp_path: Path) -> None:
    """A row whose verdicts stopped after one pair (a budget that cannot hold the pairs a verdict needs) has no
    spread to size a verdict from: its row says so instead of the whole report failing (seen: a NaN crash)."""
    keep(tmp_path / "server-0-00", verdict_doc([1.01], 138.0, "budget"))
    keep(tmp_path / "vllm-0-00", verdict_doc([1.01, 0.98, 1.0], 80.0, "done"))
    rows = needed(tmp_path, "output_throughput", 0.05).splitlines()
    [server] = [r for r in rows if r.startswith("| vLLM server")]
    assert server.endswith("| 1 | - | 1.010 | 138 | - | - |")
    [engine] = [r for r in rows if r.startswith("| vLLM engine")]
    assert "| - |" not in engine and engine.count("|") == 9


def test_aa_banks_are_drawn_with_labels_swapped(tmp_path: Path) -> None:
    """A/A pairs whose sample happens to sit 10% off: drawn as they are, a 'regression' every time; with the
    label swap the A/A design guarantees, the signed-rank signs are fair coins and false alarms stay under alpha."""
    rng = np.random.default_rng(1)
    off = [0.9] * 8
    keep(tmp_path / "dispatch-0-00", verdict_doc(off, 10.0, "budget", max_pairs=8))
    keep(tmp_path / "dispatch-0.1-00", verdict_doc(off, 10.0, "done", max_pairs=8))
    found = banks(tmp_path, "output_throughput")
    aa, slowed = found[("dispatch", 0.0)], found[("dispatch", 0.1)]
    assert aa.exchangeable and not slowed.exchangeable
    assert {replay(slowed, "output_throughput", rng).verdict for _ in range(5)} == {"regression"}
    alarms = sum(replay(aa, "output_throughput", rng).verdict == "regression" for _ in range(100))
    assert alarms <= 10  # P(regression) <= alpha / 2 = 2.5% by the per-look level; 10 of 100 is far beyond chance


def test_replay_judges_with_the_test_the_verdicts_ran(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Verdicts run with --test t record their boundaries; the replay uses them, not the signed-rank level: a
    steady 10% slowdown is called at the t-test's first look that can decide (sooner than signed-rank's)."""
    monkeypatch.setenv("BATCHPERF_CACHE", str(tmp_path / "cache"))
    t = make_test("t", 14, 0.05)
    doc = verdict_doc([0.89 + 0.01 * (i % 3) for i in range(14)], 50.0, "done")
    doc["settings"].update(t.to_dict())
    keep(tmp_path / "compute-0.05-00", doc)
    bank = banks(tmp_path, "output_throughput")[("compute", 0.05)]
    s = replay(bank, "output_throughput", np.random.default_rng(0))
    assert s.verdict == "regression" and s.pairs == t.needs
    assert t.needs < min_pairs(per_look_level(14, 0.05)[0])


def test_the_estimate_can_replay_the_same_pairs_with_the_other_test(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BATCHPERF_CACHE", str(tmp_path / "cache"))
    keep(tmp_path / "compute-0.05-00", verdict_doc([0.89 + 0.01 * (i % 3) for i in range(14)], 50.0, "done"))
    bank = banks(tmp_path, "output_throughput")[("compute", 0.05)]
    assert judge_for(bank, None).test == "signed-rank"  # what the verdicts ran (their ab.json predates --test)
    t = judge_for(bank, "t")
    assert t.test == "t" and len(t.crit) == 14
    s = replay(bank, "output_throughput", np.random.default_rng(0), "t")
    assert s.verdict == "regression" and s.pairs == t.needs
