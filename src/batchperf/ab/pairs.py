"""One A/B pair: the order its sides run in, its two results files read once (:func:`read_pair`), and folding them
into every cell still measured (failures, the cell's identity on both sides, the values, the verdicts)."""

from __future__ import annotations

from collections.abc import Mapping

from batchperf.ab.cell import CellState
from batchperf.ab.env import SideRun
from batchperf.ab.judging import add_pair, judge_cell
from batchperf.ab.result import AbResult, Pair
from batchperf.regress.fingerprint import cell_identity, identity_diff
from batchperf.regress.verdict import Verdict
from batchperf.results.io import ResultsFile, read_results
from batchperf.results.record import CellRecord


def order_of(index: int) -> tuple[str, str]:
    """A B, B A, A B, B A, … (pair 1 is A B): each side runs first as often as second."""
    return ("A", "B") if index % 2 == 1 else ("B", "A")


def failure_of(run: SideRun, cell_id: str, records: Mapping[str, CellRecord]) -> str | None:
    """Why ``cell_id`` gave no usable numbers in this run (None: it did)."""
    outcome = run.outcomes.get(cell_id)
    if outcome is not None and outcome.status != "passed":
        return f"{outcome.status}: {outcome.message}".strip().rstrip(":")
    if cell_id not in records:
        return "no results (the cell did not run)"
    return None


def read_pair(runs: Mapping[str, SideRun]) -> dict[str, ResultsFile]:
    """Environment label -> its process's results file, parsed: the one read of a pair's files, which the identity
    check (:func:`check_identity`), the folding (:func:`absorb`) and the choice of rounds
    (:func:`batchperf.ab.warmup.choose_rounds`) all take. A side that wrote no results file is absent."""
    return {label: read_results(run.results) for label, run in runs.items() if run.results is not None}


def cells_of(files: Mapping[str, ResultsFile], label: str) -> dict[str, CellRecord]:
    """cell id -> record of ``label``'s results file (none: no cells)."""
    found = files.get(label)
    return {} if found is None else {rec.id: rec for rec in found.records}


def absorb(result: AbResult, pair: Pair, files: Mapping[str, ResultsFile]) -> None:
    """Fold a finished pair (its results ``files``, :func:`read_pair`) into every measuring cell: failures, identity
    checks, values, verdicts."""
    records = {label: cells_of(files, label) for label in pair.runs}
    for cell in measuring(result):
        fails = {label: why for label, run in pair.runs.items()
                 if (why := failure_of(run, cell.id, records[label])) is not None}
        if fails:
            cell.failures.update(fails)
            cell.verdict = Verdict.FAILED
            both = "both environments" if len(fails) == 2 else f"environment {next(iter(fails))} only"
            cell.note = f"pair {pair.index}: fails in {both}"
            continue
        a, b = records["A"][cell.id], records["B"][cell.id]
        # the engine's settings may differ on purpose (--b-env VLLM_CPU_KVCACHE_SPACE=4): ab compares across them,
        # as across the upgrade axes, and its report names the variables that differ
        if diffs := identity_diff(cell_identity(a, engine=False), cell_identity(b, engine=False)):
            cell.verdict = Verdict.NOT_JUDGED
            cell.note = "the environments ran different cells: " + "; ".join(diffs)
            continue
        add_pair(cell, result.settings, a, b, pair.index)
        judge_cell(cell, result.sequential_test, pair.index)


def measuring(result: AbResult) -> list[CellState]:
    """Cells still being measured: not settled, not failed, not incomparable."""
    return [c for c in result.cells.values()
            if not c.settled and c.verdict not in (Verdict.FAILED, Verdict.NOT_JUDGED)]


def check_identity(files: Mapping[str, ResultsFile], index: int) -> str:
    """A problem with the hardware identity pair ``index``'s two results files (:func:`read_pair`) recorded (empty
    when they match, or when a side recorded none)."""
    prints = {label: raw.get("identity", {}) for label, file in files.items() if (raw := file.fingerprint) is not None}
    if len(prints) == 2 and (diffs := identity_diff(prints["A"], prints["B"])):
        return f"pair {index}: the environments ran on different hardware identities: {'; '.join(diffs)}"
    return ""
