"""`batchperf run`: the tier's cells through a child pytest, into a results JSON."""

import json
import os
import subprocess
import sys
from pathlib import Path

from paths import REPO

ENV = {**os.environ, "PYTHONPATH": str(REPO / "src")}  # the child finds this checkout's batchperf from any folder


def test_run_writes_results_of_the_narrowed_tier(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    done = subprocess.run(
        [sys.executable, "-m", "batchperf.cli", "run", "--tier", "cpu", "--out", str(out),
         "--batchperf-backends=hf-static", "--batchperf-batch-sizes=2", "--batchperf-prompt-lens=8",
         "--batchperf-concurrency=2", "--batchperf-num-prompts=3", "--batchperf-rounds=1",
         "--batchperf-output-lens=2,3", "--", "-q", "-k", "test_cell"],
        cwd=REPO, env=ENV, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"results of the cpu tier in {out}" in done.stdout
    cells = [b["extra_info"]["cell"]["id"] for b in json.loads(out.read_text())["benchmarks"]]
    assert cells == ["cpu-tiny-qwen2-hf-static-bs2-p8-c2"]


def test_run_outside_a_checkout_names_the_fix(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "batchperf.cli", "run", "--tier", "cpu"], cwd=tmp_path, env=ENV,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 4 and "no performance suite at perf_tests/" in done.stderr  # pytest's usage error


# a stand-in cell (no model) whose first round gets the SIGTERM a CI runner sends on a timeout
STOPPED_CELL = """
import os, signal

def test_cell(benchmark, batchperf_params):
    benchmark.pedantic(lambda: os.kill(os.getpid(), signal.SIGTERM), rounds=1, iterations=1)
"""


def test_an_interrupted_run_that_finished_no_cell_keeps_the_results_already_at_out(tmp_path: Path) -> None:
    # issue 59, 7: the earlier results at --out were replaced by a file without a cell
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_cells.py").write_text(STOPPED_CELL)
    out = tmp_path / "r.json"
    out.write_text('{"benchmarks": ["an earlier run"]}')
    done = subprocess.run(
        [sys.executable, "-m", "batchperf.cli", "run", "--tier", "cpu", "--suite", str(suite), "--out", str(out),
         "--batchperf-backends=hf-static", "--batchperf-batch-sizes=1", "--batchperf-prompt-lens=8",
         "--batchperf-concurrency=1", "--", "-p", "no:cacheprovider"],
        cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-3000:]  # interrupted (README, exit codes)
    assert out.read_text() == '{"benchmarks": ["an earlier run"]}'
    assert f"batchperf: {out} kept as it was: this run wrote no results (exit code 2)" in done.stdout


def test_the_plugin_loads_by_name_without_autoloading(tmp_path: Path) -> None:
    """As on a machine where batchperf is not installed: PYTHONPATH=src and -p batchperf.suite.plugin."""
    env = {**ENV, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "perf_tests", "-m", "cpu", "-q", "-p", "no:cacheprovider",
         "-p", "batchperf.suite.plugin", "-p", "pytest_benchmark.plugin", "--batchperf-backends=hf-static",
         "--batchperf-batch-sizes=2", "--batchperf-prompt-lens=8", "--batchperf-concurrency=2",
         "--batchperf-num-prompts=3", "--batchperf-rounds=1", "--batchperf-output-lens=2,3",
         f"--benchmark-json={tmp_path / 'r.json'}"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "1 passed" in done.stdout and (tmp_path / "r.json").exists()
