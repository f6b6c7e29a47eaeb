"""tools/machine_probe.py: N probes in a row, then each figure's mean and sd%; a missing figure is counted, not 0."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tool_module import tool_module

from batchperf.telemetry.probe import MachineProbe


def test_it_prints_each_probe_then_the_mean_and_sd_of_each_figure(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    fakes = iter([MachineProbe({"gemm_gflops": 100.0, "copy_gbps": 10.0}, {"interp_mops": "a sandbox"}),
                  MachineProbe({"gemm_gflops": 102.0, "copy_gbps": 10.0, "interp_mops": 40.0})])
    with tool_module("machine_probe") as tool:
        monkeypatch.setattr(tool, "probe", lambda: next(fakes))
        assert tool.main(["--count", "2", "--json", str(tmp_path / "p.json")]) == 0
        with pytest.raises(SystemExit):
            tool.main(["--count", "1"])
    out = capsys.readouterr()
    assert "GEMM         mean    101.000 GFLOP/s  sd  1.40%  (2 probes)" in out.out
    assert "memory copy  mean     10.000 GB/s     sd  0.00%  (2 probes)" in out.out
    assert "interpreter  mean     40.000 Mops/s   sd   nan%  (1 probes, 1 missing)" in out.out
    assert "interp_mops missing: a sandbox" in out.err and "--count must be >= 2" in out.err
    assert len(json.loads((tmp_path / "p.json").read_text())) == 2
