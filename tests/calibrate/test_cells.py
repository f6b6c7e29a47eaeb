"""batchperf.calibrate.cells: the detector's cells, one definition for the detector and the studies of ab."""

from __future__ import annotations

import pytest

from batchperf.calibrate.cells import DETECTOR_CELLS, DetectorCell


def test_each_hf_static_cell_is_narrowed_to_one_cpu_cell() -> None:
    for kind in (DETECTOR_CELLS["compute"], DETECTOR_CELLS["dispatch"]):
        args = dict(zip(kind.selection[::2], kind.selection[1::2], strict=True))
        assert args["-m"] == "cpu" and args["--batchperf-backends"] == "hf-static"
        assert all("," not in args[axis] for axis in ("--batchperf-batch-sizes", "--batchperf-prompt-lens",
                                                      "--batchperf-concurrency"))


@pytest.mark.parametrize("kind", sorted(DETECTOR_CELLS))
def test_each_selection_collects_exactly_one_cell(suite: pytest.Pytester, kind: str) -> None:
    """The real suite, collected with the cell's selection: one test, the cell its name says (a ``-k`` that also
    matched vLLM's server or traffic cells would judge two cells in every verdict)."""
    result = suite.runpytest(*DETECTOR_CELLS[kind].selection, "-p", "no:cacheprovider", "--collect-only", "-q")
    collected = [line for line in result.outlines if "::test_cell[" in line]
    assert len(collected) == 1, collected
    name = DETECTOR_CELLS[kind].name
    backend = {"vllm": "-vllm-bs", "server": "-vllm-server-bs"}.get(kind, "-hf-static-bs")
    assert backend in collected[0] and name.split()[-1] in collected[0] and name.split()[-3] in collected[0]


@pytest.mark.parametrize(("field", "value"), [("slowdown", 0.0), ("slowdown", 1.0), ("target", -1), ("target", 21)])
def test_a_bad_cell_names_its_field(field: str, value: float) -> None:
    good = {"name": "x", "selection": (), "slowdown": 0.05, "target": 18}
    with pytest.raises(ValueError, match=field):
        DetectorCell(**{**good, field: value})
