"""The gate inside pytest never switches itself off, and never passes what it did not judge (issue 14, items 2, 5).

Runs the same stand-in cell as tests/suite/test_gate_plugin.py (a hand-made record, no model) through pytester.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gate_samples import CELL_TEST, cell_info, results_file, run
from paths import SUPPORT

from batchperf.regress import fingerprint


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.syspathinsert(SUPPORT)
    pytester.makepyfile(test_cells=CELL_TEST)
    return pytester


# --- 2. every --benchmark-compare value compares, or is a usage error saying what was expected -----


@pytest.mark.parametrize("value", ["baselines", "typo.json", "0001", "/no/such/dir/baseline.json"])
def test_a_compare_value_that_is_no_file_is_a_usage_error(suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
                                                          value: str) -> None:
    (suite.path / "baselines").mkdir()  # a real folder
    res = run(suite, monkeypatch, f"--benchmark-compare={value}", SLOW="5")  # a 5× slowdown must not pass
    assert res.ret == pytest.ExitCode.USAGE_ERROR, res.stdout.str()
    res.stderr.fnmatch_lines([f"*batchperf gate: --benchmark-compare={value}: *"
                              "expected the path of a baseline.json or a results JSON file*"])
    assert "INTERNALERROR" not in res.stdout.str() + res.stderr.str()


def test_a_compare_path_that_is_a_file_still_compares(suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    path = results_file(suite.path / "ref.json", [cell_info()], fp=fingerprint.current())
    res = run(suite, monkeypatch, f"--benchmark-compare={path}", SLOW="5")
    assert res.ret == 1
    res.stdout.fnmatch_lines([f"compared with {path}: 1 regression"])


# --- 5. a baseline too noisy to gate is listed in the summary, never a pass ------------------------


def noisy_baseline(path: Path) -> Path:
    rec = cell_info(spread=0.3)  # rounds at ×0.7, ×1, ×1.3: 3 × spread ≈ 73%, above the CPU throughput cap
    return results_file(path, [rec], fp=fingerprint.current())  # this machine: compared, not "no baseline"


def test_a_too_noisy_baseline_is_listed_and_fails_only_when_required(
        suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    ref = noisy_baseline(suite.path / "noisy.json")
    res = run(suite, monkeypatch, f"--benchmark-compare={ref}", "--benchmark-json=out.json")
    assert res.ret == 0
    res.stdout.fnmatch_lines([f"compared with {ref}: 1 inconclusive",
                              "inconclusive cpu-tiny-qwen2-hf-static-bs4-p64-c8: output_throughput, request_throughput (too noisy to gate*cap*"])
    gate = json.loads((suite.path / "out.json").read_text())["benchmarks"][0]["extra_info"]["gate"]
    assert gate["verdict"] == "inconclusive"
    strict = run(suite, monkeypatch, f"--benchmark-compare={ref}", "--batchperf-require-baseline")
    assert strict.ret == 1
    strict.stdout.fnmatch_lines(["*cpu-tiny-qwen2-hf-static-bs4-p64-c8: inconclusive against*"])


def test_a_noisy_baseline_still_catches_a_gross_regression(suite: pytest.Pytester,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    ref = noisy_baseline(suite.path / "noisy.json")
    res = run(suite, monkeypatch, f"--benchmark-compare={ref}", SLOW="5")  # −80%: beyond even ±73%
    assert res.ret == 1
    res.stdout.fnmatch_lines(["REGRESSION cpu-tiny-qwen2-hf-static-bs4-p64-c8: output_throughput -80.0%*"])
