"""`batchperf ab`'s warm-up pair (discarded) and its choice of rounds per process, with fake environments whose
processes take a given start-up and round time; and a process that dies mid-run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ab_fakes import CELLS, FakeEnvs
from paths import REPO

from batchperf.ab.env import Environment
from batchperf.ab.report import render_ab_markdown
from batchperf.ab.run import how_it_ended, run_ab
from batchperf.ab.settings import DEFAULT_ROUNDS, Settings
from batchperf.ab.warmup import MAX_ROUNDS, MIN_ROUNDS, WARMUP_ROUNDS


def settings(tmp_path: Path, **kwargs: object) -> Settings:
    base = {"a": Environment("A", Path("/py/a"), dir=REPO), "b": Environment("B", Path("/py/b"), dir=REPO),
            "pytest_args": ("-m", "cpu"), "out": tmp_path / "ab", "max_pairs": 20, "max_minutes": None,
            "design": "sequential"}
    return Settings(**{**base, **kwargs})  # type: ignore[arg-type]


def run(fakes: FakeEnvs, s: Settings):  # noqa: ANN201
    return run_ab(s, runner=fakes.run, prober=fakes.probe, collector=fakes.collect)


def rounds_arg(args: list[str]) -> str:
    return next(a for a in args if a.startswith("--batchperf-rounds="))


def test_a_warm_up_pair_runs_first_and_is_never_judged_or_counted(tmp_path: Path) -> None:
    fakes = FakeEnvs(speed={"A": 1.0, "B": 0.9}, cells=CELLS[:1], seconds=10.0, round_s=1.0)
    result = run(fakes, settings(tmp_path))
    assert result.exit_code == 1
    # the warm-up (A B), then pair 1 (A B), pair 2 (B A), ...
    assert [label for label, _ in fakes.runs[:4]] == ["A", "B", "A", "B"]
    assert len(fakes.runs) == 2 + 2 * len(result.pairs)
    assert (tmp_path / "ab" / "warmup-A.json").exists() and (tmp_path / "ab" / "warmup-B.json").exists()
    cell = next(iter(result.cells.values()))
    assert len(cell.metrics["output_throughput"].a) == len(result.pairs)  # the warm-up's numbers are not there
    saved = json.loads((tmp_path / "ab" / "ab.json").read_text())
    assert saved["warmup"]["ran"] and saved["warmup"]["discarded"] and saved["warmup"]["rounds"] == WARMUP_ROUNDS
    assert set(saved["warmup"]["seconds"]) == {"A", "B"}
    assert [p["index"] for p in saved["pairs"]][:1] == [1]
    page = render_ab_markdown(result)
    assert "warm-up: one process of A and of B" in page and "discarded" in page


@pytest.mark.parametrize(("startup_s", "round_s", "chosen"), [
    (10.0, 1.0, 10),  # rounds as long as the start-up
    (60.0, 0.5, MAX_ROUNDS),  # vLLM's engine cell: a minute's start against 0.5 s rounds -> the cap
    (2.0, 1.0, MIN_ROUNDS),  # a start cheaper than a few rounds -> the floor
])
def test_rounds_are_chosen_from_the_warm_up_when_not_given(tmp_path: Path, startup_s: float, round_s: float,
                                                           chosen: int) -> None:
    fakes = FakeEnvs(cells=CELLS[:1], noise=0.004, seconds=startup_s, round_s=round_s)
    result = run(fakes, settings(tmp_path, margin=0.05))
    assert result.rounds is not None and result.rounds.chosen == chosen and result.rounds.given is None
    assert result.rounds.startup_s == pytest.approx(startup_s) and result.rounds.round_s == pytest.approx(round_s)
    assert rounds_arg(fakes.runs[0][1]) == f"--batchperf-rounds={WARMUP_ROUNDS}"  # the warm-up
    assert {rounds_arg(args) for _, args in fakes.runs[2:]} == {f"--batchperf-rounds={chosen}"}
    saved = json.loads((tmp_path / "ab" / "ab.json").read_text())["rounds"]
    assert saved["chosen"] == chosen and saved["given"] is None and "start-up" in saved["why"]
    assert f"{chosen} round(s) per process, chosen from the warm-up" in render_ab_markdown(result)


def test_given_rounds_are_used_as_given_and_the_warm_up_runs_no_more_than_its_own(tmp_path: Path) -> None:
    fakes = FakeEnvs(cells=CELLS[:1], noise=0.004, seconds=60.0, round_s=0.5)
    result = run(fakes, settings(tmp_path, rounds=7, margin=0.05))
    assert result.rounds is not None and (result.rounds.chosen, result.rounds.given) == (7, 7)
    assert [rounds_arg(args) for _, args in fakes.runs[:2]] == [f"--batchperf-rounds={WARMUP_ROUNDS}"] * 2
    assert {rounds_arg(args) for _, args in fakes.runs[2:]} == {"--batchperf-rounds=7"}
    saved = json.loads((tmp_path / "ab" / "ab.json").read_text())
    assert saved["rounds"]["why"] == "given" and saved["warmup"]["rounds"] == WARMUP_ROUNDS
    fewer = FakeEnvs(cells=CELLS[:1], noise=0.004, seconds=60.0, round_s=0.5)
    run(fewer, settings(tmp_path / "fewer", rounds=2, margin=0.05))
    assert {rounds_arg(args) for _, args in fewer.runs} == {"--batchperf-rounds=2"}  # the warm-up too: never more


def test_rounds_in_the_pytest_arguments_count_as_given(tmp_path: Path) -> None:
    fakes = FakeEnvs(cells=CELLS[:1], noise=0.004, seconds=60.0, round_s=0.5)
    result = run(fakes, settings(tmp_path, pytest_args=("-m", "cpu", "--batchperf-rounds=4"), margin=0.05))
    assert result.rounds is not None and (result.rounds.chosen, result.rounds.given) == (4, 4)
    assert all(sum(a.startswith("--batchperf-rounds") for a in args) == 1 for _, args in fakes.runs)


def test_without_a_warm_up_the_first_pair_chooses_for_the_rest(tmp_path: Path) -> None:
    fakes = FakeEnvs(cells=CELLS[:1], noise=0.004, seconds=10.0, round_s=1.0)
    result = run(fakes, settings(tmp_path, warmup=False, margin=0.05))
    assert rounds_arg(fakes.runs[0][1]) == f"--batchperf-rounds={DEFAULT_ROUNDS}"
    assert {rounds_arg(args) for _, args in fakes.runs[2:]} == {"--batchperf-rounds=10"}
    assert result.rounds is not None and "first pair" in result.rounds.why
    saved = json.loads((tmp_path / "ab" / "ab.json").read_text())
    assert saved["warmup"]["ran"] is False and saved["warmup"]["why"] == "--no-warmup"
    assert not (tmp_path / "ab" / "warmup-A.json").exists()


def test_a_warm_up_that_crashes_fails_the_run_before_any_pair(tmp_path: Path) -> None:
    fakes = FakeEnvs(crash={"B"})
    result = run(fakes, settings(tmp_path))
    assert result.status == "failed" and result.exit_code == 4 and not result.pairs
    assert "environment B failed to run in the warm-up (pytest exit 3)" in result.reason


def test_a_process_killed_mid_run_names_side_pair_cell_and_signal_and_keeps_the_pairs(tmp_path: Path) -> None:
    # runs 1-2: the warm-up, 3-4: pair 1, 5: pair 2's B (B A): killed
    fakes = FakeEnvs(speed={"A": 1.0, "B": 0.5}, cells=CELLS[:2], killed={5: 137})
    result = run(fakes, settings(tmp_path, rounds=5))
    assert result.status == "failed" and result.exit_code == 4
    assert "environment B failed to run in pair 2 (killed by SIGKILL, exit 137" in result.reason
    assert all(cid in result.reason for cid in CELLS[:2]) and "1 finished pair(s) are kept" in result.reason
    assert "BrokenPipe" not in result.reason
    assert all(len(c.metrics["output_throughput"].a) == 1 for c in result.cells.values())  # pair 1 kept
    saved = json.loads((tmp_path / "ab" / "ab.json").read_text())
    assert saved["exit_code"] == 4 and len(saved["pairs"]) == 2


def test_how_a_process_ended_in_words() -> None:
    assert how_it_ended(137).startswith("killed by SIGKILL, exit 137")
    assert how_it_ended(-9).startswith("killed by SIGKILL, exit -9")
    assert how_it_ended(143) == "killed by SIGTERM, exit 143"
    assert how_it_ended(3) == "pytest exit 3"
    assert how_it_ended(0) == "pytest exit 0, no results file"
