"""The detector's cells: the CPU cells whose ``ab`` verdicts calibrate it (studies/ab-detector/README.md).

One definition of each cell's pytest selection, its injected slowdown and its target, read by the detector
(``tools/ab_detector.py``) and the studies that measure ``ab`` on the same cells (``studies/ab-*/``), so a
study's figures are always about the cells the detector judges.

Beside the two ``hf-static`` cells, vLLM's own two (issue 36): the in-process engine cell and the server cell at
bs 4, p 64, c 16. Their slowdown is injected inside vLLM's engine core by the ``batchperf_inject`` vLLM plugin
(``batchperf.backends.inject``), so it slows the forward pass in the process vLLM spawns, not the driver.
"""

from __future__ import annotations

from dataclasses import dataclass

VERDICTS = 20  # a target is out of this many verdicts (the "18/20")


@dataclass(frozen=True, slots=True)
class DetectorCell:
    name: str
    selection: tuple[str, ...]  # the pytest arguments that select the one cell
    slowdown: float  # injected into B for the "slowed" verdicts
    target: int  # of VERDICTS: slowed verdicts that must say regression

    def __post_init__(self) -> None:
        if not 0 < self.slowdown < 1:
            raise ValueError(f"slowdown {self.slowdown}: must be a fraction in (0, 1)")
        if not 0 <= self.target <= VERDICTS:
            raise ValueError(f"target {self.target}: must be a count of verdicts in [0, {VERDICTS}]")


def _cell(bs: str, prompt: str, conc: str) -> tuple[str, ...]:
    return ("-m", "cpu", "--batchperf-backends", "hf-static", "--batchperf-batch-sizes", bs,
            "--batchperf-prompt-lens", prompt, "--batchperf-concurrency", conc)


def _vllm_cell(cell_id: str) -> tuple[str, ...]:
    """A vLLM cell of the CPU tier by its id: ``-k`` matches a substring, so the id without the tier and model
    prefix selects that cell and no other (tests/calibrate/test_cells.py collects each selection to hold it)."""
    return ("-m", "cpu", "-k", cell_id)


DETECTOR_CELLS = {
    "compute": DetectorCell("compute-bound hf-static bs8 p512 c16", _cell("8", "512", "16"), 0.05, 18),
    "dispatch": DetectorCell("dispatch-bound hf-static bs4 p64 c16", _cell("4", "64", "16"), 0.10, 18),
    "vllm": DetectorCell("vLLM engine bs4 p64 c16", _vllm_cell("vllm-bs4-p64-c16"), 0.05, 18),
    "server": DetectorCell("vLLM server bs4 p64 c16", _vllm_cell("vllm-server-bs4-p64-c16"), 0.05, 18),
}
