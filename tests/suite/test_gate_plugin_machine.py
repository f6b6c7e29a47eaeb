"""The gate plugin names the machine's own slowdown beside a regression, and can leave such a cell not judged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gate_samples import CELL_TEST, PLUGINS, cell_info, results_file
from paths import SUPPORT

from batchperf.regress import fingerprint
from batchperf.regress.machine import PROBE_KEY
from batchperf.suite import gate_plugin
from batchperf.telemetry.probe import MachineProbe

QUIET = MachineProbe({"gemm_gflops": 60.0, "copy_gbps": 12.0, "interp_mops": 40.0})
BUSY = MachineProbe({"gemm_gflops": 30.0, "copy_gbps": 6.0, "interp_mops": 20.0})


def baseline_with_probes(path: Path) -> Path:
    results_file(path, [cell_info()], fp=fingerprint.current())  # this machine: compared
    data = json.loads(path.read_text())
    data["machine_info"][PROBE_KEY] = {"start": QUIET.to_dict(), "end": QUIET.to_dict()}
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(("mode", "ret", "line"), [
    ("mark", 1, "REGRESSION cpu-tiny-qwen2-hf-static-bs4-p64-c8: * (the machine itself measured 50% slower on "
                "interpreter than when the baseline was made (20 vs 40 Mops/s; the cell is dispatch-bound)*"),
    ("not-judged", 0, "not judged cpu-tiny-qwen2-hf-static-bs4-p64-c8: *the machine itself measured 50% slower*"
                      "not judged (--batchperf-machine-moved=not-judged)*"),
])
def test_a_regression_on_a_slower_machine_is_marked_or_not_judged(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, mode: str, ret: int, line: str) -> None:
    pytester.syspathinsert(SUPPORT)
    pytester.makepyfile(test_cells=CELL_TEST)
    monkeypatch.setattr(gate_plugin, "probe", lambda: BUSY)  # the probe at the verdict
    monkeypatch.setenv("SLOW", "3")
    ref = baseline_with_probes(pytester.path / "ref.json")
    res = pytester.runpytest(*PLUGINS, f"--benchmark-compare={ref}", f"--batchperf-machine-moved={mode}",
                             "--benchmark-json=out.json")
    assert res.ret == ret
    res.stdout.fnmatch_lines([line])
    gate = json.loads((pytester.path / "out.json").read_text())["benchmarks"][0]["extra_info"]["gate"]
    assert gate["machine_probe"] == BUSY.to_dict()


def test_an_unknown_mode_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.syspathinsert(SUPPORT)
    pytester.makepyfile(test_cells=CELL_TEST)
    res = pytester.runpytest(*PLUGINS, "--batchperf-machine-moved=ignore")
    assert res.ret == 4
    res.stderr.fnmatch_lines(["*--batchperf-machine-moved: invalid choice: 'ignore'*"])
