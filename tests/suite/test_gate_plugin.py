"""The gate inside pytest, run through pytester: pinned baseline, re-measurement, summary, pytest-benchmark's own checks."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest
from gate_samples import CELL_TEST, CPU_TPUT_TOL, GPU_FP, PLUGINS, cell_info, results_file, run
from paths import REPO, SUPPORT

from batchperf.cli import refresh
from batchperf.regress import fingerprint
from batchperf.regress.store import BASELINE_FILE


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.syspathinsert(SUPPORT)
    pytester.makepyfile(test_cells=CELL_TEST)
    return pytester


def pin(suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, **env: str) -> Path:
    """Run the cell, then pin it with the refresh tool, as a user would."""
    assert run(suite, monkeypatch, "--benchmark-json=r.json", **env).ret == 0
    data = json.loads((suite.path / "r.json").read_text())
    assert data["machine_info"]["batchperf"]["key"] == fingerprint.current().key
    parser = argparse.ArgumentParser()
    refresh.add_cli_args(parser)
    assert refresh.main(parser.parse_args([str(suite.path / "r.json"), "--baselines",
                                           str(suite.path / "baselines")])) == 0
    return suite.path / "baselines" / fingerprint.current().key / BASELINE_FILE


def test_pinned_baseline_passes_then_a_confirmed_slowdown_fails_with_the_table(
        suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    path = pin(suite, monkeypatch)
    ok = run(suite, monkeypatch, "--benchmark-compare")
    assert ok.ret == 0
    ok.stdout.fnmatch_lines(["*batchperf gate*", f"compared with {path}: 1 no change"])
    bad = run(suite, monkeypatch, "--benchmark-compare", "--benchmark-json=bad.json", SLOW="3")
    assert bad.ret == 1
    gate = json.loads((suite.path / "bad.json").read_text())["benchmarks"][0]["extra_info"]["gate"]
    assert gate["verdict"] == "regression" and gate["remeasured"] and "output_throughput" in gate["regressed"]
    bad.stdout.fnmatch_lines([
        "*batchperf gate: cpu-tiny-qwen2-hf-static-bs4-p64-c8: REGRESSION (confirmed by a re-measurement)",
        "*metric*baseline*measured*change*tolerance*verdict",
        f"*output_throughput*100*33.33 (1st 33.33)*-66.7%*{CPU_TPUT_TOL}*REGRESSION",
        "*REGRESSION cpu-tiny-qwen2-hf-static-bs4-p64-c8: output_throughput -66.7%*",
    ])
    bad.stdout.fnmatch_lines(["*set BATCHPERF_BASELINE_PYTHON to that environment's python*"])
    named = run(suite, monkeypatch, "--benchmark-compare", SLOW="3", BATCHPERF_BASELINE_PYTHON="/venvs/old/bin/python")
    assert named.ret == 1
    named.stdout.fnmatch_lines(["*Confirm it side by side (A = the baseline's environment*",
                                f"  batchperf ab --a /venvs/old/bin/python --b {sys.executable} -- test_cells.py::test_cell"])


def test_an_unconfirmed_violation_is_noise(suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pin(suite, monkeypatch)
    res = run(suite, monkeypatch, "--benchmark-compare", SLOW="3", AGAIN="1.0")
    assert res.ret == 0
    res.stdout.fnmatch_lines(["*noise cpu-tiny-qwen2-hf-static-bs4-p64-c8: a first violation was not confirmed*"])


def test_an_improvement_passes_with_refresh_suggested(suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pin(suite, monkeypatch)
    res = run(suite, monkeypatch, "--benchmark-compare", SLOW="0.5")
    assert res.ret == 0
    res.stdout.fnmatch_lines(["*improvement cpu-tiny-qwen2-hf-static-bs4-p64-c8: output_throughput +100.0%*"
                              "refresh suggested*"])


def test_no_pinned_baseline_is_reported_and_fails_only_when_required(
        suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    # A run saved under .benchmarks must never stand in for the pinned baseline.
    assert run(suite, monkeypatch, "--benchmark-autosave", SLEEP="0.001").ret == 0
    res = run(suite, monkeypatch, "--benchmark-compare", SLOW="3")
    assert res.ret == 0
    res.stdout.fnmatch_lines(["*no pinned baseline for this machine at*baselines*baseline.json*",
                              "no baseline cpu-tiny-qwen2-hf-static-bs4-p64-c8: no pinned baseline*"])
    assert "Comparing against benchmarks from" not in res.stdout.str()
    strict = run(suite, monkeypatch, "--benchmark-compare", "--batchperf-require-baseline")
    assert strict.ret == 1
    strict.stdout.fnmatch_lines(["*no comparable baseline*batchperf refresh*"])


def test_compare_path_with_other_hardware_is_never_compared(
        suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    other = results_file(suite.path / "gpu.json", [cell_info()], fp=GPU_FP)
    res = run(suite, monkeypatch, f"--benchmark-compare={other}", SLOW="3")
    assert res.ret == 0
    res.stdout.fnmatch_lines([f"compared with {other}: 1 no baseline",
                              "no baseline cpu-tiny-qwen2-hf-static-bs4-p64-c8: hardware.*"])


def test_benchmark_compare_fail_still_works_against_the_pinned_file(
        suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    path = pin(suite, monkeypatch, SLEEP="0.001")
    # pytest-benchmark raises PerformanceRegression out of its terminal summary: run it as a real process.
    src = REPO / "src"
    monkeypatch.setenv("PYTHONPATH", f"{src}:{SUPPORT}")
    monkeypatch.setenv("SLEEP", "0.02")
    res = suite.runpytest_subprocess(*PLUGINS, "--benchmark-compare", "--benchmark-compare-fail=mean:50%")
    assert res.ret != 0
    res.stdout.fnmatch_lines([f"test_cell (*{path.parent.name}/baseline)*", "test_cell (NOW)*"])
    assert "Performance has regressed" in res.stdout.str() + res.stderr.str()


def test_a_corrupt_pinned_baseline_is_a_usage_error(suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    path = pin(suite, monkeypatch)
    path.write_text("{")
    res = run(suite, monkeypatch, "--benchmark-compare")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines([f"*batchperf gate: {path}: not valid JSON*git checkout*"])


def test_bad_tolerance_option_is_a_usage_error(suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    res = run(suite, monkeypatch, "--batchperf-tolerance", "p99_e2el_ms")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["*expected METRIC=FRACTION*"])


def test_the_summary_names_a_void_cells_cause_first() -> None:
    """A GPU cell whose clocks did not hold: the summary line gives the card's state, not a metric's own note."""
    from gate_samples import cell_info

    from batchperf.regress.fingerprint import Fingerprint, HardwareIdentity
    from batchperf.regress.gate import GateConfig, compare_cell
    from batchperf.suite.gate_plugin import GateSession, summary_lines

    cell = "gpu-qwen2.5-0.5b-hf-static-bs8-p128-c64"
    base = cell_info(cell, tier="gpu")
    base.metrics["p99_itl_ms"] = float("nan")  # a metric not judged for its own reason as well
    hot = cell_info(cell, tier="gpu")
    hot.telemetry.update(nvml="ok", sm_clock_drop=0.2, sm_clock_start_mhz=1980.0, sm_clock_min_mhz=1584.0)
    gate = GateSession(Fingerprint(HardwareIdentity("x86_64", "cpu", 1)), GateConfig(), False, active=True,
                       verdicts=[compare_cell(cell, base, hot)])
    line = summary_lines(gate)[1]
    assert line.startswith(f"not judged {cell}: void: not judged, this run's GPU did not hold its clocks")
