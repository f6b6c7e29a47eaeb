"""The detector's cells: the two CPU cells whose ``ab`` verdicts calibrate it (studies/ab-detector/README.md).

One definition of each cell's pytest selection, its injected slowdown and its target, read by the detector
(``tools/ab_detector.py``) and the studies that measure ``ab`` on the same cells (``studies/ab-*/``), so a
study's figures are always about the cells the detector judges.
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


DETECTOR_CELLS = {
    "compute": DetectorCell("compute-bound hf-static bs8 p512 c16", _cell("8", "512", "16"), 0.05, 18),
    "dispatch": DetectorCell("dispatch-bound hf-static bs4 p64 c16", _cell("4", "64", "16"), 0.10, 18),
}
