"""A hardware upgrade judged: the prediction rule, with fake probes and fake rooflines."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from gate_samples import CPU_FP, GPU_FP, cell_info, copied, results_file, scaled

from batchperf.regress.gate import GateConfig
from batchperf.regress.hardware import (
    BEAT,
    LOST,
    NO_PREDICTION,
    NOT_COMPARABLE,
    SCALED,
    compare_hardware,
    judge_scaling,
    render_hardware_markdown,
    setup_notes,
)
from batchperf.regress.machine import PROBE_KEY, Bound, SessionProbes
from batchperf.results.io import read_results
from batchperf.telemetry.probe import MachineProbe

OLD = SessionProbes(MachineProbe({"gemm_gflops": 50.0, "copy_gbps": 10.0, "interp_mops": 20.0}))
NEW = SessionProbes(MachineProbe({"gemm_gflops": 150.0, "copy_gbps": 12.0, "interp_mops": 40.0}))  # 3×, 1.2×, 2×


def test_a_dispatch_bound_cell_is_predicted_by_the_interpreter_probe() -> None:
    old = cell_info()  # 14 tokens per step: dispatch-bound
    row = judge_scaling("c", old, scaled(old, 1 / 2.0), OLD, NEW)  # twice as fast, as the interpreter got
    assert (row.bound, row.predicted, row.basis, row.verdict) == (Bound.DISPATCH, 2.0, "probe: interpreter Mops/s",
                                                                  SCALED)
    assert row.measured == pytest.approx(2.0) and row.efficiency == pytest.approx(1.0) and row.tolerance == 0.15
    lost = judge_scaling("c", old, scaled(old, 1 / 1.4), OLD, NEW)  # 1.4× where 2× was on offer: 70%
    assert lost.verdict is LOST and lost.efficiency == pytest.approx(0.7)
    beat = judge_scaling("c", old, scaled(old, 1 / 2.6), OLD, NEW)
    assert beat.verdict is BEAT


def test_a_gemm_bound_cell_is_predicted_by_the_gemm_probe_and_a_gpu_by_its_peaks() -> None:
    old = copied(cell_info())
    old.cell.update(batch_size=8, prompt_len="512")  # 172 tokens per step: GEMM-bound
    row = judge_scaling("c", old, scaled(old, 1 / 3.0), OLD, NEW)
    assert (row.bound, row.predicted, row.verdict) == (Bound.GEMM, 3.0, SCALED)
    gpu_old, gpu_new = copied(old), scaled(old, 1 / 1.5)
    gpu_old.efficiency.update(peak_flops_per_s=989e12, peak_bandwidth_bytes_per_s=3.35e12)
    gpu_new.efficiency.update(peak_flops_per_s=1978e12, peak_bandwidth_bytes_per_s=4.8e12)  # 2× the FLOP/s
    row = judge_scaling("c", gpu_old, gpu_new, OLD, NEW)
    assert row.basis == "device peak FLOP/s" and row.predicted == pytest.approx(2.0) and row.verdict is LOST
    tight = judge_scaling("c", gpu_old, gpu_new, OLD, NEW, GateConfig().with_floor("output_throughput", 0.3))
    assert tight.tolerance == 0.3 and tight.verdict is SCALED  # 75% of the prediction: within ±30%


def test_no_probe_is_no_prediction_with_the_reason_and_another_workload_is_not_comparable() -> None:
    old = cell_info()
    row = judge_scaling("c", old, old, None, NEW)
    assert row.verdict is NO_PREDICTION and row.predicted is None and row.note == (
        "OLD has no interpreter probe (not probed (recorded before batchperf probed the machine))")
    other = copied(old)
    other.cell["concurrency"] = 16
    assert judge_scaling("c", old, other, OLD, NEW).verdict is NOT_COMPARABLE


def file_with(path: Path, probes: SessionProbes, slowdown: float, fp: object) -> Path:
    results_file(path, [scaled(cell_info(), slowdown)], fp=fp)
    data = json.loads(path.read_text())
    data["machine_info"][PROBE_KEY] = probes.to_dict()
    path.write_text(json.dumps(data))
    return path


def test_two_files_give_one_row_per_shared_cell_and_a_table(tmp_path: Path) -> None:
    old = read_results(file_with(tmp_path / "old.json", OLD, 1.0, CPU_FP))
    new = read_results(file_with(tmp_path / "new.json", NEW, 1 / 1.3, GPU_FP))
    [row] = compare_hardware(old, new)
    assert row.verdict is LOST and row.measured == pytest.approx(1.3)
    table = render_hardware_markdown([row], "old.json", "new.json")
    assert ("| cpu-tiny-qwen2-hf-static-bs4-p64-c8 | dispatch | 1.30 | 2.00 | probe: interpreter Mops/s | 65% | "
            "±15% | lost efficiency |") in table
    assert table.endswith("1 lost efficiency")
    # a cell id holding '|' stays in its column (regress.verdict.markdown_cell)
    piped = render_hardware_markdown([replace(row, cell="cpu|x")], "old.json", "new.json")
    assert "| cpu\\|x | dispatch | 1.30 |" in piped


def test_runs_on_other_thread_counts_are_said_to_judge_more_than_the_hardware(tmp_path: Path) -> None:
    one = replace(CPU_FP, identity=replace(CPU_FP.identity, cpu_threads=1))
    two = replace(CPU_FP, identity=replace(CPU_FP.identity, cpu_threads=2))
    old = read_results(file_with(tmp_path / "old.json", OLD, 1.0, two))
    new = read_results(file_with(tmp_path / "new.json", NEW, 1 / 2.0, one))
    [note] = setup_notes(old, new)
    assert note.startswith("the cells ran on 2 CPU thread(s) in OLD and 1 in NEW (OMP_NUM_THREADS)")
    table = render_hardware_markdown(compare_hardware(old, new), "old.json", "new.json", [note])
    assert f"- **not the hardware alone**: {note}" in table
    same = read_results(file_with(tmp_path / "same.json", NEW, 1 / 2.0, two))
    assert setup_notes(old, same) == [] and setup_notes(old, read_results(file_with(tmp_path / "none.json", NEW,
                                                                                  1.0, CPU_FP))) == []
