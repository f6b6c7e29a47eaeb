"""``batchperf compare`` applies the machine-moved rule with the two files' session probes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gate_samples import cell_info, results_file, scaled

from batchperf.regress.compare import compare_files, gate_config
from batchperf.regress.machine import PROBE_KEY
from batchperf.regress.verdict import Verdict
from batchperf.results.io import read_results
from batchperf.telemetry.probe import MachineProbe


def run(path: Path, slowdown: float, interp: float) -> Path:
    results_file(path, [scaled(cell_info(), slowdown)])
    data = json.loads(path.read_text())
    data["machine_info"][PROBE_KEY] = {"start": MachineProbe({"interp_mops": interp}).to_dict()}
    path.write_text(json.dumps(data))
    return path


def test_compare_marks_or_leaves_not_judged_a_regression_the_machine_explains(tmp_path: Path) -> None:
    a, b = read_results(run(tmp_path / "a.json", 1.0, 40.0)), read_results(run(tmp_path / "b.json", 1.5, 28.0))
    [marked] = compare_files(a, b, gate_config(None, []))
    assert marked.verdict is Verdict.REGRESSION and marked.notes[-1].startswith(
        "the machine itself measured 30% slower on interpreter than when the baseline was made (28 vs 40 Mops/s")
    [judged] = compare_files(a, b, gate_config(None, [], machine_moved="not-judged"))
    assert judged.verdict is Verdict.NOT_JUDGED
    with pytest.raises(ValueError, match="gate machine_moved must be one of mark, not-judged, got 'x'"):
        gate_config(None, [], machine_moved="x")
