"""One A/B pair (``batchperf.ab.pairs``): its two results files read once (:func:`read_pair`), the hardware identity
they recorded, and folding them into every cell still measured: values, failures, cells that differ."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ab_fakes import CELLS, NODEIDS, write_results

from batchperf.ab.cell import CellState
from batchperf.ab.env import Environment, Outcome, SideRun
from batchperf.ab.pairs import absorb, check_identity, failure_of, measuring, order_of, read_pair
from batchperf.ab.result import AbResult, Pair
from batchperf.ab.settings import Settings
from batchperf.ab.stats import SequentialTest
from batchperf.regress.verdict import Verdict
from batchperf.results.record import ResultsError

TWO = CELLS[:2]


def side(tmp_path: Path, label: str, speed: float, cells: list[str] = TWO, identity: dict | None = None,
         outcomes: dict[str, Outcome] | None = None) -> SideRun:
    """One process of ``label`` whose results file holds ``cells`` at ``speed`` (A's speed is 1)."""
    path = tmp_path / f"pair-{label}.json"
    write_results(path, dict.fromkeys(cells, speed), identity)
    found = outcomes or {c: Outcome("passed") for c in cells}
    return SideRun(label, 0, 10.0, path, tmp_path / f"pair-{label}.log", found)


def ab_result(tmp_path: Path, cells: list[str] = TWO) -> AbResult:
    env = Environment("A", Path("/py/a"))
    s = Settings(env, Environment("B", Path("/py/b")), ("-m", "cpu"), tmp_path / "ab")
    return AbResult(s, {}, SequentialTest("signed-rank", level=0.01), "", {c: CellState(c, NODEIDS[c]) for c in cells})


def test_order_alternates_so_each_side_runs_first_as_often_as_second() -> None:
    assert [order_of(i) for i in range(1, 5)] == [("A", "B"), ("B", "A"), ("A", "B"), ("B", "A")]


def test_read_pair_reads_each_side_s_file_once_and_leaves_out_a_side_without_one(tmp_path: Path) -> None:
    runs = {"A": side(tmp_path, "A", 1.0), "B": SideRun("B", 3, 1.0, None, tmp_path / "b.log")}
    files = read_pair(runs)
    assert list(files) == ["A"] and [r.id for r in files["A"].records] == TWO


def test_a_results_file_that_cannot_be_read_is_a_results_error_naming_it(tmp_path: Path) -> None:
    broken = tmp_path / "pair-B.json"
    broken.write_text("{not json")
    with pytest.raises(ResultsError, match="pair-B.json"):
        read_pair({"A": side(tmp_path, "A", 1.0), "B": SideRun("B", 0, 1.0, broken, tmp_path / "b.log")})


def test_check_identity_names_the_pair_and_what_differs(tmp_path: Path) -> None:
    same = read_pair({"A": side(tmp_path, "A", 1.0), "B": side(tmp_path, "B", 1.0)})
    assert check_identity(same, 3) == ""
    other = json.loads(json.dumps(same["A"].fingerprint["identity"]))
    other["cpu_model"] = "Other CPU"
    moved = read_pair({"A": side(tmp_path, "A", 1.0), "B": side(tmp_path, "B", 1.0, identity=other)})
    problem = check_identity(moved, 3)
    assert problem.startswith("pair 3: the environments ran on different hardware identities: cpu_model: ")
    assert problem.endswith("→ Other CPU")
    assert check_identity({"A": moved["A"]}, 3) == ""  # one side recorded none: nothing to compare


def test_absorb_adds_each_side_s_values_to_every_measured_cell(tmp_path: Path) -> None:
    result = ab_result(tmp_path)
    runs = {"A": side(tmp_path, "A", 1.0), "B": side(tmp_path, "B", 0.9)}
    absorb(result, Pair(1, ("A", "B"), runs, None), read_pair(runs))
    for cell in result.cells.values():
        tput = cell.metrics["output_throughput"]
        assert len(tput.a) == len(tput.b) == 1 and tput.b[0] / tput.a[0] == pytest.approx(0.9)
        assert tput.deciding and cell.verdict is Verdict.INCONCLUSIVE and not cell.failures  # one pair decides nothing


def test_a_cell_that_fails_or_did_not_run_on_one_side_is_failed_saying_where(tmp_path: Path) -> None:
    result = ab_result(tmp_path)
    fails = {TWO[0]: Outcome("passed"), TWO[1]: Outcome("failed", "AssertionError: boom")}
    runs = {"A": side(tmp_path, "A", 1.0, cells=TWO[:1]), "B": side(tmp_path, "B", 1.0, cells=TWO[:1], outcomes=fails)}
    absorb(result, Pair(2, ("B", "A"), runs, None), read_pair(runs))
    broken = result.cells[TWO[1]]
    assert broken.verdict is Verdict.FAILED and broken.note == "pair 2: fails in both environments"
    assert broken.failures == {"A": "no results (the cell did not run)", "B": "failed: AssertionError: boom"}
    assert not broken.metrics and result.cells[TWO[0]].verdict is Verdict.INCONCLUSIVE
    assert measuring(result) == [result.cells[TWO[0]]]  # the failed cell is left out of later pairs


def test_a_cell_the_two_sides_ran_differently_is_not_judged(tmp_path: Path) -> None:
    result = ab_result(tmp_path, cells=TWO[:1])
    runs = {"A": side(tmp_path, "A", 1.0, cells=TWO[:1]), "B": side(tmp_path, "B", 1.0, cells=TWO[:1])}
    data = json.loads(runs["B"].results.read_text())
    data["benchmarks"][0]["extra_info"]["cell"]["prompt_len"] = 4096
    runs["B"].results.write_text(json.dumps(data))
    absorb(result, Pair(1, ("A", "B"), runs, None), read_pair(runs))
    cell = result.cells[TWO[0]]
    assert cell.verdict is Verdict.NOT_JUDGED and cell.note.startswith("the environments ran different cells: ")
    assert "prompt_len" in cell.note and measuring(result) == []


def test_failure_of_says_why_a_cell_gave_no_numbers() -> None:
    run = SideRun("B", 1, 1.0, Path("r.json"), Path("r.log"),
                  {"c1": Outcome("skipped", "backend 'vllm' cannot run here"), "c2": Outcome("error", ""),
                   "c3": Outcome("passed")})
    assert failure_of(run, "c1", {}) == "skipped: backend 'vllm' cannot run here"
    assert failure_of(run, "c2", {}) == "error"
    assert failure_of(run, "c3", {}) == "no results (the cell did not run)"
    assert failure_of(run, "c3", {"c3": object()}) is None  # type: ignore[dict-item]


def test_measuring_leaves_out_settled_failed_and_not_judged_cells(tmp_path: Path) -> None:
    result = ab_result(tmp_path, cells=[])
    result.cells = {"open": CellState("open", "n1"), "settled": CellState("settled", "n2", settled_at=6),
                    "failed": CellState("failed", "n3", verdict=Verdict.FAILED),
                    "other": CellState("other", "n4", verdict=Verdict.NOT_JUDGED)}
    assert [c.id for c in measuring(result)] == ["open"]

