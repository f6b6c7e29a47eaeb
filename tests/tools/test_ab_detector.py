"""tools/ab_detector.py: its options and what it prints; the scoring and replay it prints are
``batchperf.calibrate`` (tests/calibrate/).

The study itself (real processes, hours) is not run here."""

from __future__ import annotations

from pathlib import Path

import pytest
from detector_samples import keep, verdict_doc
from tool_module import tool_module

from batchperf.calibrate.study import Study


@pytest.fixture(scope="module")
def tool():
    with tool_module("ab_detector") as module:
        yield module


@pytest.mark.parametrize(("argv", "problem"), [
    (["--estimate-only"], "--estimate-only reads the verdicts in --keep DIR; give it"),
    (["--cells", "compute,gpu"], "unknown cell kind(s) ['gpu']; known: compute, dispatch"),
    (["--rounds", "many"], "argument --rounds: 'many': give a number of rounds, or 'auto'"),
])
def test_bad_options_are_usage_errors(tool, argv: list[str], problem: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        tool.main(argv)
    assert stop.value.code == 2 and problem in capsys.readouterr().err


def test_a_kept_verdict_with_other_settings_is_a_usage_error_before_anything_runs(
        tool, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = verdict_doc([0.9] * 8, 50.0, "done")
    settings = Study(("dispatch",)).settings("dispatch", 0.1, 0, tmp_path)
    doc["settings"].update(pytest_args=list(settings.pytest_args), test=settings.test, design=settings.design)
    keep(tmp_path / "dispatch-0.1-00", doc)
    with pytest.raises(SystemExit) as stop:
        tool.main(["--cells", "dispatch", "--aa", "0", "--slowed", "1", "--rounds", "5", "--keep", str(tmp_path)])
    assert stop.value.code == 2 and "was measured with other settings (rounds)" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dispatch-0.1-00"]


def test_estimate_only_prints_every_table_from_the_kept_verdicts(tool, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    doc = verdict_doc([0.9] * 8, 50.0, "done")
    for i, pair in enumerate(doc["pairs"], 1):  # kept as in the repository: ab.json alone, no results files
        for label in ("A", "B"):
            pair[label]["results"] = f"pair-{i:03d}-{label}.json"
    keep(tmp_path / "dispatch-0.1-00", doc)
    assert tool.main(["--keep", str(tmp_path), "--estimate-only", "--estimate", "20"]) == 0
    out = capsys.readouterr().out
    assert "| dispatch-bound hf-static bs4 p64 c16 | 10% | 1 | 1 (100%) |" in out
    assert "settings: alpha 0.05, margin ±3%, deciding output_throughput, at most 14 pairs / 10 min" in out
    for title in ("estimate: ab's judging replayed on 20 verdicts per row", "what a verdict would need",
                  "where the noise is", "wall-clock throughput against CPU time"):
        assert title in out
    assert "1 verdict(s) kept without their pairs' results files: left out of the two tables below" in out


def test_nothing_finished_is_said_and_is_exit_1(tool, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    keep(tmp_path / "dispatch-0.1-00", verdict_doc([0.9] * 3, 50.0, "interrupted"))
    assert tool.main(["--keep", str(tmp_path), "--estimate-only"]) == 1
    assert f"ab_detector: no finished verdict in {tmp_path}" in capsys.readouterr().err


def test_rounds_auto_leaves_the_choice_to_ab_and_is_kept_apart_from_given_rounds(
        tool, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = tool.parser().parse_args(["--rounds", "auto"])
    assert args.rounds is None
    settings = Study(("dispatch",), rounds=args.rounds).settings("dispatch", 0.1, 0, tmp_path)
    assert settings.rounds is None and settings.given_rounds is None  # ab chooses from its warm-up
    doc = verdict_doc([0.9] * 8, 50.0, "done")  # a verdict kept from a run with given rounds
    doc["settings"].update(pytest_args=list(settings.pytest_args), test=settings.test, design=settings.design)
    keep(tmp_path / "dispatch-0.1-00", doc)
    with pytest.raises(SystemExit) as stop:
        tool.main(["--cells", "dispatch", "--aa", "0", "--slowed", "1", "--rounds", "auto", "--keep", str(tmp_path)])
    assert stop.value.code == 2 and "was measured with other settings (rounds)" in capsys.readouterr().err
