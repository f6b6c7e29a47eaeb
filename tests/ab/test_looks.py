"""`batchperf ab` plans its looks for the pairs its minutes hold (batchperf.ab.looks), with fake environments whose
processes take a given start-up and round time on a fake clock."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from ab_fakes import CELLS, FakeEnvs
from paths import REPO

from batchperf.ab.env import Environment
from batchperf.ab.kept import ServerStart, pair_prices, pairs_within
from batchperf.ab.looks import LookPlan, looser, pair_seconds, plan_looks
from batchperf.ab.run import run_ab
from batchperf.ab.settings import Settings
from batchperf.ab.stats import make_test
from batchperf.calibrate.replay import planned_pairs


def settings(tmp_path: Path, **kwargs: object) -> Settings:
    base = {"a": Environment("A", Path("/py/a"), dir=REPO), "b": Environment("B", Path("/py/b"), dir=REPO),
            "pytest_args": ("-m", "cpu"), "out": tmp_path / "ab", "max_pairs": 30, "max_minutes": 10.0,
            "design": "sequential"}  # the fakes run one process at a time
    return Settings(**{**base, **kwargs})  # type: ignore[arg-type]


@pytest.mark.parametrize(("design", "seconds"), [("resident", 30 + 2 * 40 * 0.45), ("duet", 30 + 40 * 0.45),
                                                 ("sequential", 2 * (30 + 40 * 0.45))])
def test_a_pair_s_seconds_follow_its_design(design: str, seconds: float) -> None:
    assert pair_seconds(0.45, 30.0, 40, design) == pytest.approx(seconds)


def test_the_plan_is_the_pairs_the_minutes_left_hold_and_only_ever_fewer_than_asked() -> None:
    """vLLM's engine cell on the 2-core AMD host: a resident pair ~66 s, 36 s of warm-up, 10 minutes."""
    plan = plan_looks(30, 10.0, 36.0, 0, 66.0, 6)
    assert plan is not None and plan.pairs == 8 and plan.asked == 30
    assert "--max-minutes 10 holds about 8 pairs of 66 s" in plan.why
    assert plan_looks(30, 10.0, 136.0, 1, 66.0, 6).pairs == 8  # a pair already measured counts
    assert plan_looks(8, 10.0, 36.0, 0, 66.0, 6) is None  # the pairs asked end the run first
    assert plan_looks(30, None, 36.0, 0, 66.0, 6) is None  # no minutes: nothing to plan for
    assert plan_looks(30, 5.0, 36.0, 0, 66.0, 6) is None  # 4 pairs cannot decide: the budget rule says so
    with pytest.raises(ValueError, match="a plan only ever lowers the budget"):
        LookPlan(30, 30, 66.0, "")


def test_a_run_whose_minutes_hold_fewer_pairs_plans_its_looks_for_them(tmp_path: Path) -> None:
    """A process starts in 10 s and rounds take 0.25 s: 40 rounds, a sequential pair of 40 s; 10 minutes less the
    40-s warm-up hold 14 pairs, so each look is judged at the level planned for 14 looks, not 30."""
    fakes = FakeEnvs(cells=CELLS[:1], noise=0.004, seconds=10.0, round_s=0.25)
    lines: list[str] = []
    result = run_ab(settings(tmp_path), runner=fakes.run, prober=fakes.probe, collector=fakes.collect,
                    progress=lines.append, clock=_clock(fakes, 20.0))
    planned = make_test("signed-rank", 14, 0.05)
    assert result.looks is not None and result.looks.pairs == 14 and result.max_pairs == 14
    assert result.sequential_test.level == pytest.approx(planned.level)
    assert result.sequential_test.level > make_test("signed-rank", 30, 0.05).level
    assert result.exit_code == 0 and len(result.pairs) == planned.needs  # A/A: no change at the first look it can
    assert any(line.startswith("looks planned for 14 pairs") for line in lines)
    saved = json.loads((tmp_path / "ab" / "ab.json").read_text())["settings"]
    assert saved["max_pairs"] == 30 and saved["looks"]["pairs"] == 14 and planned_pairs(saved) == 14
    assert saved["per_look_level"] == pytest.approx(planned.level)
    assert "looks planned for 14 pairs, not 30" in saved["level_method"]


def test_the_planned_pairs_end_the_run_and_say_so(tmp_path: Path) -> None:
    fakes = FakeEnvs(cells=CELLS[:1], noise=0.3, seconds=10.0, round_s=0.25)
    result = run_ab(settings(tmp_path), runner=fakes.run, prober=fakes.probe, collector=fakes.collect,
                    clock=_clock(fakes, 20.0))
    assert result.status == "budget" and len(result.pairs) == 14
    assert result.reason.startswith("the 14 pairs the looks were planned for spent (--max-minutes 10 holds")


@pytest.mark.parametrize("kwargs", [{"max_minutes": 60.0}, {"max_minutes": None}, {"max_pairs": 10}])
def test_minutes_that_hold_every_pair_asked_change_nothing(tmp_path: Path, kwargs: dict[str, object]) -> None:
    fakes = FakeEnvs(cells=CELLS[:1], noise=0.004, seconds=10.0, round_s=0.25)
    s = settings(tmp_path, **kwargs)
    result = run_ab(s, runner=fakes.run, prober=fakes.probe, collector=fakes.collect, clock=_clock(fakes, 20.0))
    assert result.looks is None and result.max_pairs == s.max_pairs
    assert result.sequential_test.level == pytest.approx(make_test("signed-rank", s.max_pairs, 0.05).level)
    assert json.loads((tmp_path / "ab" / "ab.json").read_text())["settings"]["looks"] is None


def test_given_rounds_plan_from_the_warm_up_s_costs_too(tmp_path: Path) -> None:
    fakes = FakeEnvs(cells=CELLS[:1], noise=0.004, seconds=10.0, round_s=0.25)
    result = run_ab(settings(tmp_path, rounds=40), runner=fakes.run, prober=fakes.probe, collector=fakes.collect,
                    clock=_clock(fakes, 20.0))
    assert result.rounds is not None and result.rounds.given == 40 and result.rounds.startup_s == pytest.approx(10.0)
    assert result.looks is not None and result.looks.pairs == 14


def test_pairs_slower_than_the_warm_up_said_plan_the_looks_again_for_fewer(tmp_path: Path) -> None:
    """The warm-up prices a pair at 40 s (a start-up of 10 s and 40 rounds of 0.25 s, each side), so 13 looks are
    planned; the pairs take 60 s on the clock, so after pair 1 the run plans again for the 9 the minutes now hold,
    at a per-look level no stricter than before."""
    fakes = FakeEnvs(cells=CELLS[:1], noise=0.3, seconds=10.0, round_s=0.25)
    lines: list[str] = []
    result = run_ab(settings(tmp_path), runner=fakes.run, prober=fakes.probe, collector=fakes.collect,
                    progress=lines.append, clock=_clock(fakes, 30.0))
    planned = [line for line in lines if line.startswith("looks planned for")]
    assert planned[0].startswith("looks planned for 13 pairs") and "the warm-up's start-up and rounds" in planned[0]
    assert planned[1].startswith("looks planned for 9 pairs")
    assert "9 pairs of 60 s (the 1 pair(s) measured)" in planned[1]
    assert len(planned) == 2  # the pairs after it took what the new plan assumed: no third plan
    assert result.looks is not None and (result.looks.pairs, result.looks.after) == (9, 1)
    assert result.sequential_test.level == pytest.approx(make_test("signed-rank", 9, 0.05).level)
    assert result.status == "budget" and len(result.pairs) == 9
    saved = json.loads((tmp_path / "ab" / "ab.json").read_text())["settings"]
    assert saved["looks"]["after"] == 1 and planned_pairs(saved) == 9
    assert saved["level_method"].count("looks planned for") == 1 and "9 pairs, not 30" in saved["level_method"]


def test_a_run_the_warm_up_gave_no_plan_is_planned_when_its_pairs_run_slower(tmp_path: Path) -> None:
    """The warm-up prices a pair at 40 s, so the 10 minutes hold the 13 pairs asked and no plan is made; the pairs
    take 60 s on the clock (as a kept server's restart pair does), so after pair 1 the run plans its looks for the 9
    the minutes now hold, at a per-look level no stricter than the 13-look test it judged pair 1 with."""
    fakes = FakeEnvs(cells=CELLS[:1], noise=0.3, seconds=10.0, round_s=0.25)
    lines: list[str] = []
    result = run_ab(settings(tmp_path, max_pairs=13), runner=fakes.run, prober=fakes.probe,
                    collector=fakes.collect, progress=lines.append, clock=_clock(fakes, 30.0))
    planned = [line for line in lines if line.startswith("looks planned for")]
    assert len(planned) == 1 and "9 pairs of 60 s (the 1 pair(s) measured)" in planned[0]
    assert result.looks is not None and (result.looks.pairs, result.looks.after) == (9, 1)
    assert result.sequential_test.level == pytest.approx(make_test("signed-rank", 9, 0.05).level)
    assert looser(make_test("signed-rank", 9, 0.05), make_test("signed-rank", 13, 0.05))
    assert result.status == "budget" and len(result.pairs) == 9


def test_a_run_the_warm_up_priced_too_high_is_planned_from_its_faster_pairs(tmp_path: Path) -> None:
    """A kept server's warm-up pays the servers' start-up, which its kept pairs do not: it priced a pair so high
    that the 10 minutes held fewer pairs than any plan decides from, so no plan was made, while the pairs ran
    faster; the budget rule, which reads the measured pairs, then found 6 fit where the 13-look test needs 7 and
    stopped the run after 4 pairs (the kept-server A/A row of 2026-12-07 13:24, verdict 2). Now the measured
    pairs plan the looks: the 6 they hold, at the 6-look test's level, no look of it stricter."""
    fakes = FakeEnvs(cells=CELLS[:1], noise=0.3, seconds=70.0, round_s=0.25)
    lines: list[str] = []
    result = run_ab(settings(tmp_path, max_pairs=13), runner=fakes.run, prober=fakes.probe,
                    collector=fakes.collect, progress=lines.append, clock=_clock(fakes, 40.0))
    assert result.rounds is not None
    predicted = pair_seconds(result.rounds.round_s, result.rounds.startup_s, result.rounds.chosen, result.design)
    assert predicted > 120  # the warm-up's price: 10 minutes hold fewer than 6 pairs of it after the warm-up
    planned = [line for line in lines if line.startswith("looks planned for")]
    assert len(planned) == 1 and "6 pairs of 80 s (the 1 pair(s) measured)" in planned[0]
    assert result.looks is not None and (result.looks.pairs, result.looks.after) == (6, 1)
    assert result.sequential_test.level == pytest.approx(make_test("signed-rank", 6, 0.05).level)
    assert result.status == "budget" and len(result.pairs) == 6  # before: stopped after 1 pair, "a verdict needs 7"


def test_kept_pairs_ahead_are_priced_as_kept_pairs_not_as_the_mean_with_a_restart(tmp_path: Path) -> None:
    """--keep-servers, fresh servers every 3 pairs: a kept pair 75 s, a restart's pair 126 s (two server starts),
    the warm-up 83 s (vLLM's server cell, the kept-server A/A row of 2026-12-07 13:49, verdict 2). After the restart
    pair 4 the mean pair was 88 s, so 10 minutes "held" 5 pairs and the verdict, planned for 6, stopped after 4; the
    two pairs left before the next restart are kept pairs of 75 s, and they fit."""
    fakes = FakeEnvs(cells=CELLS[:1], noise=0.3)
    now = [0.0]

    def runner(env, args, stem, timeout_s=None):  # noqa: ANN001, ANN202 - a process priced by its pair
        name = stem.name
        process_s = 41.5 if name.startswith("warmup") else 63.0 if name.startswith("pair-004") else 37.5
        now[0] += process_s
        return replace(fakes.run(env, args, stem, timeout_s=timeout_s), seconds=process_s)

    result = run_ab(settings(tmp_path, max_pairs=14, keep_servers=True, warmup=True, rounds=30), runner=runner,
                    prober=fakes.probe, collector=fakes.collect, clock=lambda: now[0])
    assert [s.from_pair for s in result.server_starts] == [1, 4]
    assert result.looks is not None and result.looks.pairs == 6
    assert len(result.pairs) == 6, result.reason  # before: 4, "5 pair(s) fit and a verdict needs 6"
    assert result.status == "budget" and result.reason.startswith("the 6 pairs the looks were planned for spent")


def test_a_pair_s_price_follows_its_kind_once_both_kinds_were_measured() -> None:
    starts = [ServerStart(1, "A", in_warmup=True), ServerStart(4, "B")]
    kept_only = pair_prices({1: 40.0, 2: 40.0}, starts[:1], 3, 85.0)
    assert kept_only(3) == kept_only(4) == 85.0  # no restart measured yet: the mean
    price = pair_prices({i: 63.0 if i == 4 else 37.5 for i in range(1, 5)}, starts, 3, 87.75)
    assert (price(5), price(6), price(7)) == pytest.approx((75.0, 75.0, 126.0))  # pair 7 starts fresh servers
    assert pairs_within(166.0, price, 5, 10) == 2 and pairs_within(300.0, price, 5, 10) == 3
    assert pairs_within(10_000.0, price, 5, 4) == 4  # at most the pairs left to --max-pairs


def test_pairs_as_fast_as_planned_keep_the_plan(tmp_path: Path) -> None:
    fakes = FakeEnvs(cells=CELLS[:1], noise=0.3, seconds=10.0, round_s=0.25)
    lines: list[str] = []
    result = run_ab(settings(tmp_path), runner=fakes.run, prober=fakes.probe, collector=fakes.collect,
                    progress=lines.append, clock=_clock(fakes, 20.0))
    assert sum(line.startswith("looks planned for") for line in lines) == 1
    assert result.looks is not None and result.looks.after == 0


def test_only_a_test_no_look_of_which_is_stricter_may_replace_a_plan() -> None:
    assert looser(make_test("signed-rank", 9, 0.05), make_test("signed-rank", 13, 0.05))
    assert not looser(make_test("signed-rank", 13, 0.05), make_test("signed-rank", 9, 0.05))
    assert looser(make_test("t", 9, 0.05), make_test("t", 13, 0.05))
    assert not looser(make_test("t", 13, 0.05), make_test("t", 9, 0.05))
    assert not looser(make_test("t", 9, 0.05), make_test("signed-rank", 13, 0.05))


def _clock(fakes: FakeEnvs, process_s: float):  # noqa: ANN202
    now = [0.0]
    fakes.on_run = lambda: now.__setitem__(0, now[0] + process_s)
    return lambda: now[0]
