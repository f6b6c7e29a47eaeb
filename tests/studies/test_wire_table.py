"""studies/wire/table.py: its command line, and the TTFT rule it derives from the study's runs."""

from __future__ import annotations

import pytest
from paths import REPO
from tool_module import tool_module


def test_help_is_a_usage_not_a_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    # issue 59: `table.py --help` opened a file named --help
    with tool_module("table") as table, pytest.raises(SystemExit) as done:
        table.main(["--help"])
    assert done.value.code == 0 and "RUNS.json" in capsys.readouterr().out


def test_a_missing_file_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with tool_module("table") as table, pytest.raises(SystemExit) as done:
        table.main(["no-such.json"])
    assert done.value.code == 2 and "no-such.json" in capsys.readouterr().err


def test_the_ttft_rule_is_derived_from_the_runs_and_marks_none_of_them(capsys: pytest.CaptureFixture[str]) -> None:
    with tool_module("table") as table:
        table.main([str(REPO / "studies/wire/data/runs.json")])
    out = capsys.readouterr().out
    assert "the wire's mean TTFT reached the server's x 1.198 + 2 ms (concurrency 1, run 5)" in out
    assert "a client within 5% of the wire: x 1.258" in out and "marks 0 of 20 runs" in out
