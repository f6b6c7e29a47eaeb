"""The GPU check's measured floors, by hand: the A/A spread and the floor it suggests, the injected A/B's change,
the gate's verdict on both runs, and void cells left out of every figure."""

from __future__ import annotations

from pathlib import Path

import pytest
from gate_samples import copied, gpu_check_cell, results_file, scaled

from batchperf.report.gpu_check import summary
from batchperf.report.gpu_floors import aa_spread, ab_change, clock_rows, floor_rows, gate_rows, suggested_floor

CLOCKS = {"nvml": "ok", "sm_clock_start_mhz": 1980.0, "sm_clock_min_mhz": 1965.0, "sm_clock_drop": 0.0076,
          "throttle_reasons": [], "temperature_peak_c": 61.0, "power_mean_w": 412.0}


def gpu_record(backend: str, throughput: float = 1000.0, **telemetry: object):
    rec = gpu_check_cell(backend, 8, throughput)
    rec.telemetry.update(CLOCKS, **telemetry)
    return rec


def test_the_suggested_floor_is_twice_the_worst_spread_rounded_up_to_a_percent() -> None:
    assert suggested_floor([0.012, 0.021]) == 0.05  # 2 × 2.1% = 4.2% → 5%
    assert suggested_floor([0.02]) == 0.04  # exactly 4%: not rounded up to 5% by float error
    assert suggested_floor([0.001]) == 0.01  # at least 1%
    assert suggested_floor([]) is None


def test_a_void_cell_is_left_out_of_the_spread_and_the_ab() -> None:
    first = [gpu_record("hf-static"), gpu_record("continuous")]
    again = [gpu_record("hf-static", 990.0), gpu_record("continuous", 700.0, throttle_reasons=["hw_slowdown"])]
    slower = [scaled(r, 1.05) for r in first]
    spread = aa_spread(first, again)
    assert spread["output_throughput"] == {"hf-static bs8 p128": pytest.approx(10 / 995)}  # continuous was void
    change = ab_change(first, again, slower)
    assert change["output_throughput"] == pytest.approx((1000 / 1.05) / 995 - 1)
    rows = clock_rows(again)
    assert rows[1].endswith("none") and rows[2].endswith("hw_slowdown  VOID")


def test_floor_rows_say_whether_each_floor_catches_the_injected_slowdown() -> None:
    """A 5% slower forward pass costs -4.8% throughput: inside today's 5% floor, caught by a 2% suggested one."""
    first = [gpu_record("hf-static"), gpu_record("continuous")]
    again = [gpu_record("hf-static", 1008.0), gpu_record("continuous", 995.0)]
    slower = [scaled(r, 1.05) for r in first]
    rows = floor_rows(aa_spread(first, again), ab_change(first, again, slower))
    tput = next(r for r in rows if r.split()[0] == "output_throughput").split()
    assert tput[1:] == ["0.8%", "2%", "5%", "-4.8%", "no", "yes"]  # worst A/A 0.797%; A/B: mean of -5.1%, -4.5%
    p99 = next(r for r in rows if r.split()[0] == "p99_e2el_ms").split()
    assert p99[3] == "10%*"  # reported, not deciding, on the GPU tier


def test_the_gate_says_no_change_on_the_aa_and_regression_on_a_clear_ab() -> None:
    first = [gpu_record("hf-static")]
    assert gate_rows(first, [copied(first[0])], "A/A")[0].split(":")[0].endswith("no change (output_throughput +0.0%, "
                                                                                 "tolerance 5.0%)")
    row = gate_rows(first, [scaled(first[0], 1.10)], "A/B")[0]
    assert "regression (output_throughput -9.1%" in row
    hot = scaled(first[0], 1.10)
    hot.telemetry["sm_clock_drop"] = 0.2
    assert "not judged" in gate_rows(first, [hot], "A/B")[0] and "void" in gate_rows(first, [hot], "A/B")[0]
    assert gate_rows(first, [], "A/B") == ["  (A/B: no cell in common with the slice)"]


def test_the_summary_prints_clocks_floors_and_the_gate(tmp_path: Path) -> None:
    first = [gpu_record(b) for b in ("hf-static", "continuous")]
    results = results_file(tmp_path / "results.json", first)
    aa = results_file(tmp_path / "aa.json", [gpu_record("hf-static", 1010.0), gpu_record("continuous", 990.0)])
    ab = results_file(tmp_path / "ab.json", [scaled(r, 1.05) for r in first])
    text = "\n".join(summary(results, aa, ab))
    assert "clocks per cell" in text and "1980" in text
    assert "measured floors" in text and "A/A hf-static bs8 p128" in text and "A/B continuous bs8 p128" in text
