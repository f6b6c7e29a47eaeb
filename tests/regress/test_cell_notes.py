"""The gate's and compare's notes beside the metrics: a void GPU cell, the software power cap, a GPU driver that
differs from the baseline's, and wall-clock throughput against CPU time per output token."""

from __future__ import annotations

from dataclasses import replace

from gate_samples import GPU_FP, cell_info, copied, scaled

from batchperf.regress.cell_notes import HIDDEN, WAIT
from batchperf.regress.gate import compare_cell, confirm
from batchperf.regress.verdict import Verdict, render_text

GPU_CELL = "gpu-qwen2.5-0.5b-hf-static-bs8-p128-c64"
STEADY = {"nvml": "ok", "sm_clock_start_mhz": 1980.0, "sm_clock_min_mhz": 1965.0, "sm_clock_mean_mhz": 1975.0,
          "sm_clock_drop": 15 / 1980, "throttle_reasons": [], "cpu_seconds_per_output_token": 0.001}


def gpu_cell(**telemetry: object):
    rec = cell_info(GPU_CELL, tier="gpu")
    rec.telemetry.update(STEADY, **telemetry)
    return rec


def test_a_clock_drop_in_this_run_voids_the_cell_never_a_pass_nor_a_regression() -> None:
    base = gpu_cell()
    for current in (copied(base), scaled(base, 1.5)):  # unchanged, and 50% slower: the card's state decides neither
        current.telemetry.update(sm_clock_drop=0.12, sm_clock_min_mhz=1742.0)
        verdict = compare_cell(GPU_CELL, base, current)
        assert verdict.verdict is Verdict.NOT_JUDGED and verdict.void and not verdict.failed
        assert verdict.notes[0].startswith("void: not judged, this run's GPU did not hold its clocks: the SM clock "
                                           "fell 12.0% during the cell")
        assert "lowest 1742 MHz" in verdict.notes[0]
    assert "void: not judged" in render_text(verdict)


def test_a_thermal_throttle_in_the_baseline_voids_the_cell_and_asks_for_a_refresh() -> None:
    base = gpu_cell(throttle_reasons=["hw_thermal_slowdown"])
    verdict = compare_cell(GPU_CELL, base, gpu_cell())
    assert verdict.verdict is Verdict.NOT_JUDGED and verdict.void
    assert verdict.notes == ("void: not judged, the baseline's GPU did not hold its clocks: throttled by "
                             "hw_thermal_slowdown during the cell; refresh the baseline (batchperf refresh)",)


def test_the_software_power_cap_is_named_but_the_cell_is_judged() -> None:
    verdict = compare_cell(GPU_CELL, gpu_cell(), gpu_cell(throttle_reasons=["sw_power_cap"]))
    assert verdict.verdict is Verdict.NO_CHANGE and not verdict.void
    assert verdict.notes == ("this run ran at the GPU's software power cap (sw_power_cap): recorded, not voided",)


def test_a_void_cell_is_not_made_a_regression_by_its_re_measurement_nor_the_reverse() -> None:
    base = gpu_cell()
    slow = compare_cell(GPU_CELL, base, scaled(base, 1.5))
    assert slow.failed
    hot = scaled(base, 1.5)
    hot.telemetry["throttle_reasons"] = ["hw_slowdown"]
    void = compare_cell(GPU_CELL, base, hot)
    assert confirm(slow, void).verdict is Verdict.NOT_JUDGED  # the second run was void: nothing confirmed
    again = compare_cell(GPU_CELL, base, scaled(base, 1.5))
    confirmed = confirm(void, again)  # a void first run, re-run: the re-measurement alone decides
    assert confirmed.failed and confirmed.remeasured


def test_a_different_gpu_driver_is_compared_across_and_named_loudly() -> None:
    new_driver = replace(GPU_FP, upgrade={**GPU_FP.upgrade, "driver": "575.2"})
    base = gpu_cell()
    verdict = compare_cell(GPU_CELL, base, copied(base), baseline_fp=GPU_FP, current_fp=new_driver)
    assert verdict.verdict is Verdict.NO_CHANGE  # an upgrade still finds its baseline
    assert verdict.versions == {"driver": ("570.1", "575.2")}
    assert verdict.notes[0].startswith("GPU DRIVER CHANGED (driver 570.1 → 575.2): compared across the upgrade")
    same = compare_cell(GPU_CELL, base, copied(base), baseline_fp=GPU_FP, current_fp=GPU_FP)
    assert not any("DRIVER" in n for n in same.notes)


def test_wall_worse_cpu_same_is_labelled_a_wait_or_lost_overlap() -> None:
    base = gpu_cell()
    current = scaled(base, 1.25)  # wall 20% slower; the process tree's CPU time per token unchanged
    verdict = compare_cell(GPU_CELL, base, current)
    assert verdict.failed
    assert f"{WAIT} (output_throughput -20.0%, cpu_seconds_per_output_token +0.0%)" in verdict.notes


def test_cpu_worse_wall_same_is_labelled_hidden_work() -> None:
    base = gpu_cell()
    current = copied(base)
    current.telemetry["cpu_seconds_per_output_token"] = 0.0013  # +30%, under the same wall time
    verdict = compare_cell(GPU_CELL, base, current)
    assert verdict.failed  # CPU time per token is gated on its own
    assert f"{HIDDEN} (output_throughput +0.0%, cpu_seconds_per_output_token +30.0%)" in verdict.notes


def test_no_label_when_both_agree_or_one_is_missing() -> None:
    base = gpu_cell()
    both = scaled(base, 1.25)
    both.telemetry["cpu_seconds_per_output_token"] = 0.00125
    assert not any(n.startswith((WAIT, HIDDEN)) for n in compare_cell(GPU_CELL, base, both).notes)
    no_cpu = cell_info(GPU_CELL, tier="gpu")  # no CPU time recorded: nothing to disagree with
    assert not any(n.startswith((WAIT, HIDDEN)) for n in compare_cell(GPU_CELL, no_cpu, scaled(no_cpu, 1.25)).notes)
