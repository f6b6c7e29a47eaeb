"""batchperf.ab.detector: the detector's cells, one definition for the detector and the studies of ab."""

from __future__ import annotations

import pytest

from batchperf.ab.detector import DETECTOR_CELLS, DetectorCell


def test_each_cell_selects_one_cpu_hf_static_cell() -> None:
    for kind in DETECTOR_CELLS.values():
        args = dict(zip(kind.selection[::2], kind.selection[1::2], strict=True))
        assert args["-m"] == "cpu" and args["--batchperf-backends"] == "hf-static"
        assert all("," not in args[axis] for axis in ("--batchperf-batch-sizes", "--batchperf-prompt-lens",
                                                      "--batchperf-concurrency"))


@pytest.mark.parametrize(("field", "value"), [("slowdown", 0.0), ("slowdown", 1.0), ("target", -1), ("target", 21)])
def test_a_bad_cell_names_its_field(field: str, value: float) -> None:
    good = {"name": "x", "selection": (), "slowdown": 0.05, "target": 18}
    with pytest.raises(ValueError, match=field):
        DetectorCell(**{**good, field: value})
