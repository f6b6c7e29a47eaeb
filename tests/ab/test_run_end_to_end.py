"""`batchperf ab` for real, as CI runs it: this interpreter against itself, B slowed by the documented injection.

Real pytest processes of perf_tests on one CPU-tier cell that the injection reaches (hf-static: the hook sits
in the in-process model's forward pass; a vLLM engine's own model is not hooked). A 300% slowdown shows on
nearly every pair, so the run stops at the first look that can reject: 3 pairs (6 processes) at --alpha 0.5
(a smoke test of the command: the loose alpha only buys fewer processes), one more when a loaded machine
flips a pair; no warm-up pair (tests/ab/test_warmup.py holds it). The statistics' false-alarm and detection
rates are measured by tools/ab_detector.py, not here.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from batchperf.ab.stats.signed_rank import min_pairs, per_look_level
from batchperf.cli import main
from batchperf.results.io import read_results

CELL = ["-m", "cpu", "--batchperf-backends", "hf-static", "--batchperf-batch-sizes", "4",
        "--batchperf-prompt-lens", "64", "--batchperf-concurrency", "4", "--batchperf-num-prompts", "8"]


@pytest.mark.slow
def test_ab_catches_an_injected_slowdown_with_real_processes(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "ab"
    summary = tmp_path / "summary.md"
    code = main(["ab", "--a", sys.executable, "--b", sys.executable, "--b-env", "BATCHPERF_INJECT_SLOWDOWN=3.0",
                 "--metrics", "output_throughput", "--alpha", "0.5", "--max-pairs", "4", "--rounds", "1",
                 "--max-minutes", "20", "--no-warmup", "--out", str(out), "--markdown", str(summary), "--", *CELL])
    printed = capsys.readouterr()
    saved = json.loads((out / "ab.json").read_text())
    assert code == 1, printed.out + printed.err[-3000:]
    assert saved["status"] == "done" and saved["exit_code"] == 1
    assert saved["vars_differ"] == {"BATCHPERF_INJECT_SLOWDOWN": ["-", "3.0"]} and saved["versions_differ"] == {}
    (cell,) = saved["cells"]
    assert cell["verdict"] == "regression" and "hf-static" in cell["id"]
    level, _ = per_look_level(4, 0.5)
    assert min_pairs(level) <= cell["settled_at"] == len(saved["pairs"])  # stopped as soon as it was clear
    tput = next(m for m in cell["metrics"] if m["metric"] == "output_throughput")
    assert tput["high"] < 0 and sorted(tput["ratios"])[len(tput["ratios"]) // 2] < 0.8
    for pair in saved["pairs"]:  # each side's file is an ordinary results file
        assert read_results(pair["A"]["results"]).records and read_results(pair["B"]["results"]).records
        for label in ("A", "B"):  # each side's own session probed the machine beside its cells (issue 55)
            assert set(pair[label]["probe"]) == {"start", "end"}
            assert pair[label]["probe"]["start"]["figures"] or pair[label]["probe"]["start"]["missing"]
    assert "REGRESSION" in summary.read_text() and "BATCHPERF_INJECT_SLOWDOWN" in summary.read_text()
