"""`batchperf compare --hardware OLD NEW`: the scaling table, --markdown, and exit 1 only on lost efficiency with
--fail-on-regression."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from gate_samples import CPU_FP, GPU_FP, cell_info, results_file, scaled

from batchperf.cli import compare as compare_cli
from batchperf.regress.machine import PROBE_KEY
from batchperf.telemetry.probe import MachineProbe


def run(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    compare_cli.add_cli_args(parser)
    return compare_cli.main(parser.parse_args(list(argv)))


def machine(path: Path, interp: float | dict[str, object], speedup: float, fp: object) -> Path:
    results_file(path, [scaled(cell_info(), 1 / speedup)], fp=fp)
    data = json.loads(path.read_text())
    data["machine_info"][PROBE_KEY] = ({"start": MachineProbe({"interp_mops": interp}).to_dict()}
                                       if isinstance(interp, float) else interp)
    path.write_text(json.dumps(data))
    return path


def test_the_table_names_both_machines_and_each_cells_verdict(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old, new = machine(tmp_path / "old.json", 20.0, 1.0, CPU_FP), machine(tmp_path / "new.json", 40.0, 1.9, GPU_FP)
    md = tmp_path / "summary.md"
    assert run("--hardware", str(old), str(new), "--markdown", str(md), "--fail-on-regression") == 0
    out = capsys.readouterr().out
    assert f"A: {old}: Test CPU 9000, 2 cores" in out and f"B: {new}: NVIDIA H200 (143771 MiB)" in out
    row = "| dispatch | 1.90 | 2.00 | probe: interpreter Mops/s | 95% | ±15% | scaled as the hardware predicts |"
    assert row in out
    assert "scaled as the hardware predicts" in md.read_text()
    slow = machine(tmp_path / "slow.json", 40.0, 1.2, GPU_FP)  # 1.2× where 2× was predicted
    assert run("--hardware", str(old), str(slow)) == 0  # a verdict is no error
    assert run("--hardware", str(old), str(slow), "--fail-on-regression") == 1


def test_a_malformed_probe_block_is_an_input_error_naming_the_file(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old = machine(tmp_path / "old.json", {"start": {"figures": {"interp_mops": -1}}}, 1.0, CPU_FP)
    new = machine(tmp_path / "new.json", 40.0, 1.9, GPU_FP)
    with pytest.raises(SystemExit) as exit_info:
        run("--hardware", str(old), str(new))
    assert exit_info.value.code == compare_cli.ERROR  # 2: never 1, which means a verdict
    assert "old.json: machine_info.batchperf_probe.start: probe figures.interp_mops" in capsys.readouterr().err
