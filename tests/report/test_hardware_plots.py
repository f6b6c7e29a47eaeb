"""The report draws how each cell scaled when given results of two machines, and says why not for one."""

from __future__ import annotations

import json
from pathlib import Path

from gate_samples import CPU_FP, GPU_FP, cell_info, results_file, scaled

from batchperf.regress.machine import PROBE_KEY
from batchperf.report import build_report
from batchperf.report.hardware_plots import machine_pairs
from batchperf.results.io import read_results
from batchperf.telemetry.probe import MachineProbe


def machine(path: Path, interp: float, speedup: float, fp: object) -> Path:
    record = scaled(cell_info(), 1 / speedup)
    record.traces = []  # the sample's stand-in trace is not a run trace the other figures could draw
    record.kv["kv_tokens_per_request_mean"] = 88.0  # what the KV figure reads
    results_file(path, [record], fp=fp)
    data = json.loads(path.read_text())
    data["machine_info"][PROBE_KEY] = {"start": MachineProbe({"interp_mops": interp}).to_dict()}
    path.write_text(json.dumps(data))
    return path


def test_two_machines_get_the_scaling_figure_one_machine_says_why_not(tmp_path: Path) -> None:
    old, new = machine(tmp_path / "old.json", 20.0, 1.0, CPU_FP), machine(tmp_path / "new.json", 40.0, 1.2, GPU_FP)
    assert [(a.name, b.name) for a, b in machine_pairs([read_results(old), read_results(new)])] == [("old", "new")]
    page = build_report([old, new], tmp_path / "two").read_text()
    assert "hardware_scaling.png" in page and (tmp_path / "two" / "hardware_scaling.png").stat().st_size > 0
    again = machine(tmp_path / "again.json", 21.0, 1.0, CPU_FP)
    page = build_report([old, again], tmp_path / "one").read_text()
    assert "hardware_scaling.png" not in page and "the results files are of one machine" in page
