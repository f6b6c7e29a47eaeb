"""``--benchmark-json`` checked before any cell is measured, held by one run at a time (issue 26, item 4 and
the minor about two runs writing one file): a usage error at session start, never cells measured then lost."""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

import pytest

from batchperf.suite.results_path import lock_path

CELL = """
import pathlib
def test_cell(benchmark):
    pathlib.Path("MEASURED").write_text("a cell ran")
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)
"""


@pytest.fixture
def run(pytester: pytest.Pytester):
    pytester.makepyfile(test_one=CELL)

    def go(path: Path | str) -> pytest.RunResult:
        return pytester.runpytest(f"--benchmark-json={path}", "-p", "no:cacheprovider")

    return go


def refused(pytester: pytest.Pytester, result: pytest.RunResult, message: str) -> None:
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: --benchmark-json {message}"])
    assert not (pytester.path / "MEASURED").exists()  # refused before the first cell


def test_a_missing_folder_is_refused_before_any_cell(pytester: pytest.Pytester, run) -> None:
    missing = pytester.path / "no" / "such" / "results.json"
    refused(pytester, run(missing), f"{missing}: the folder {missing.parent} does not exist; create it first*")


def test_a_folder_is_refused(pytester: pytest.Pytester, run) -> None:
    refused(pytester, run(pytester.path), f"{pytester.path}: is a folder; give a file path*")


def test_a_read_only_folder_is_refused(pytester: pytest.Pytester, run, tmp_path: Path) -> None:
    if os.geteuid() == 0:  # root writes through file modes: /sys refuses even root a new file
        folder = Path("/sys")
    else:
        folder = tmp_path / "ro"
        folder.mkdir()
        folder.chmod(0o555)
    refused(pytester, run(folder / "results.json"), f"{folder / 'results.json'}: cannot write into {folder} (*")


def test_a_second_run_into_the_same_file_is_refused_naming_the_first(pytester: pytest.Pytester, run) -> None:
    path = pytester.path / "results.json"
    fd = os.open(lock_path(path), os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the first run, here this process, holds it
    try:
        refused(pytester, run(path), f"{path}: another pytest run (pid {os.getpid()}) is writing it; wait for it*")
    finally:
        os.close(fd)
    assert not path.exists()


def test_a_good_path_is_written_and_released(pytester: pytest.Pytester, run) -> None:
    path = pytester.path / "results.json"
    result = run(path)
    result.assert_outcomes(passed=1)
    assert [b["name"] for b in json.loads(path.read_text())["benchmarks"]] == ["test_cell"]
    fd = os.open(lock_path(path), os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the run let go of it
    finally:
        os.close(fd)
    assert sorted(p.name for p in pytester.path.iterdir() if p.name.startswith(".results")) == [".results.json.lock"]
