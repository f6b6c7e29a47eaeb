"""The prepared device check, ``ci/gpu_check.sh``: its summary by hand, and the whole script on the CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from gate_samples import gpu_check_cell, results_file
from paths import REPO, SUPPORT

from batchperf.report.gpu_check import aa_spread, main, ratio_rows, summary

SCRIPT = REPO / "ci" / "gpu_check.sh"


record = gpu_check_cell


def test_ratios_pair_the_same_cell_of_both_backends() -> None:
    records = [record("hf-static", 8, 100.0), record("continuous", 8, 250.0), record("continuous", 32, 900.0)]
    assert ratio_rows(records) == ["  qwen2.5-0.5b bs8   p128    c64   2.50x"]  # bs32 has no hf-static twin


def test_aa_spread_is_the_difference_over_the_mean() -> None:
    first = [record("hf-static", 8, 100.0, p99=50.0), record("continuous", 8, 200.0)]
    again = [record("hf-static", 8, 110.0, p99=40.0)]  # the continuous cell did not run again
    spread = aa_spread(first, again)
    assert spread["output_throughput"] == {"hf-static bs8 p128": pytest.approx(10 / 105)}
    assert spread["p99_e2el_ms"] == {"hf-static bs8 p128": pytest.approx(10 / 45)}
    assert set(spread) == {"output_throughput", "request_throughput", "p50_ttft_ms", "p50_tpot_ms", "p50_e2el_ms",
                           "p99_ttft_ms", "p99_tpot_ms", "p99_itl_ms", "p99_e2el_ms"}  # the gate's metrics


def test_the_summary_fits_one_screen(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cells = [record(b, bs, 100.0 * bs) for b in ("hf-static", "continuous") for bs in (1, 8, 32)]
    results = results_file(tmp_path / "results.json", cells)
    aa = results_file(tmp_path / "aa.json", [record("hf-static", 8, 820.0), record("continuous", 8, 760.0)])
    lines = summary(results, aa)
    assert len(lines) < 40 and max(map(len, lines)) <= 120
    assert lines[0] == "batchperf gpu-check: 6 cells on NVIDIA H200 (qwen2.5-0.5b: dummy)"
    assert any(line.startswith("gpu-qwen2.5-0.5b-continuous-bs8-p128-c64") and "1.2%" in line and "59.00" in line
               for line in lines)
    assert main([str(results), str(aa), "--out", str(tmp_path / "summary.txt")]) == 0
    assert capsys.readouterr().out == (tmp_path / "summary.txt").read_text()
    assert main([str(tmp_path / "missing.json")]) == 2


def run_script(*args: str, tmp_path: Path, timeout: int) -> subprocess.CompletedProcess[str]:
    """The script as CI runs it: no hub (offline, an empty HF cache, connections refused: tests/support/no_hub.py)."""
    env = {**os.environ, "BATCHPERF_PYTHON": sys.executable, "HF_HOME": str(tmp_path / "hf-home"),
           "PYTHONPATH": str(SUPPORT)}
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=tmp_path, env=env, capture_output=True, text=True,
                          check=False, timeout=timeout)


def test_bad_arguments_and_a_missing_gpu_are_named(tmp_path: Path) -> None:
    done = run_script("--device", "tpu", "--out", str(tmp_path / "o"), tmp_path=tmp_path, timeout=60)
    assert done.returncode == 2 and "--device must be cuda or cpu, not 'tpu'" in done.stderr
    done = run_script("--device", "cpu", tmp_path=tmp_path, timeout=60)
    assert done.returncode == 2 and "--out DIR is required" in done.stderr
    pytest.importorskip("torch")
    import torch

    if not torch.cuda.is_available():
        done = run_script("--out", str(tmp_path / "o"), tmp_path=tmp_path, timeout=120)
        assert done.returncode == 2 and "torch sees no CUDA device here" in done.stderr


@pytest.mark.slow
def test_the_cpu_slice_runs_end_to_end_without_a_hub(tmp_path: Path) -> None:
    out = tmp_path / "check"
    done = run_script("--device", "cpu", "--out", str(out), "--", "-p", "no_hub", tmp_path=tmp_path, timeout=900)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    for name in ("gpu-health.json", "results.json", "aa.json", "ab.json", "report/index.html", "summary.txt",
                 "pytest.log"):
        assert (out / name).is_file(), name
    assert json.loads((out / "gpu-health.json").read_text())["gpu"] is False  # no GPU here, and it says so
    ids = [b["extra_info"]["cell"]["id"] for b in json.loads((out / "results.json").read_text())["benchmarks"]]
    assert sorted(ids) == ["gpu-qwen2.5-0.5b-continuous-bs2-p8-c64", "gpu-qwen2.5-0.5b-hf-static-bs2-p8-c64"]
    text = (out / "summary.txt").read_text()
    assert "2 cells on cpu (qwen2.5-0.5b: dummy)" in text and "measured floors" in text
    assert "output_throughput" in text and "continuous / hf-static" in text
    assert "A/A hf-static bs2 p8" in text and "A/B continuous bs2 p8" in text  # the gate's verdict on both runs
    injected = json.loads((out / "ab.json").read_text())["machine_info"]["batchperf"]["soft"]["injected"]
    assert injected == {"BATCHPERF_INJECT_SLOWDOWN": "0.05"}  # the A/B ran with the slowdown, and says so
    for log in ("pytest.log", "aa.log", "ab.log"):
        assert "no_hub: 0 blocked connection attempt(s)" in (out / log).read_text()
    assert "decode MBU" in (out / "report" / "index.html").read_text()
