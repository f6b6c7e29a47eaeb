"""``batchperf recommend --by capacity``: each batch size's capacity under SLOs (a search, or a load sweep)."""

from __future__ import annotations

import argparse

import pytest
from gate_samples import cell_info, results_file

from batchperf.cli.recommend import add_cli_args, main
from batchperf.measure.metrics import SLO
from batchperf.measure.trace import RequestTrace, RunTrace
from batchperf.report.recommend import recommend_capacity
from batchperf.results.record import CellRecord


def at(bs: int, load: float, attainment: float, traces: list[RunTrace] | None = None, offered: int = 16
       ) -> CellRecord:
    record = cell_info(f"cpu-tiny-qwen2-hf-static-bs{bs}-p64-c8-load{load:g}")
    record.cell |= {"batch_size": bs, "load": load}
    record.slo = {"attainment": attainment, "offered": offered, "met": round(offered * attainment)}
    if traces is not None:
        record.traces = [t.to_dict() for t in traces]
    return record


def searched(bs: int, max_load: float, rate: float) -> CellRecord:
    record = at(bs, 1.0, 0.95)
    record.cell.pop("load")
    record.cell["id"] = f"cpu-tiny-qwen2-hf-static-bs{bs}-p64-c8-capacity"
    record.capacity = {"max_load": max_load, "bracket_high": max_load * 1.04, "max_request_rate": rate,
                       "attainment_at_max_load": 0.92, "target_attainment": 0.9, "converged": True}
    return record


def test_a_sweep_gives_each_batch_size_the_highest_load_before_the_first_miss() -> None:
    cells = [at(1, 0.5, 0.97), at(1, 1.0, 0.80), at(1, 1.5, 0.95),  # 1.5 recovers: noise, capacity stays 0.5
             at(4, 0.5, 1.0), at(4, 1.0, 0.93), at(4, 1.5, 0.70),
             at(8, 0.5, 0.5), at(8, 1.0, 0.2)]
    (choice,) = recommend_capacity(cells, target=0.9)
    got = {c.batch_size: (c.capacity, c.verdict) for c in choice.candidates}
    assert got == {1: (0.5, "less capacity than bs 4"), 4: (1.0, "recommended"), 8: (0.0, "no load measured meets 90%")}
    assert choice.batch_size == 4
    rate = choice.candidates[1].request_rate
    assert rate == pytest.approx(16 / 1.0)  # offered / duration at the capacity load


def test_searched_capacities_rank_by_load_and_a_tie_goes_to_the_smaller_batch() -> None:
    (choice,) = recommend_capacity([searched(2, 3.0, 6.0), searched(4, 5.0, 10.0), searched(8, 5.0, 10.0)])
    assert choice.batch_size == 4 and [c.source for c in choice.candidates] == ["search"] * 3


def test_given_slos_recompute_attainment_from_the_raw_traces() -> None:
    def trace(ttft: float) -> RunTrace:
        return RunTrace("hf-static", 1, 8, [RequestTrace(i, 64, 2, 0.0, 0.0, (ttft, ttft + 0.1)) for i in range(4)],
                        end=1.0)
    cells = [at(1, 1.0, 1.0, [trace(0.05)], 4), at(1, 2.0, 1.0, [trace(0.30)], 4)]  # stored attainment: both 100%
    (loose,) = recommend_capacity(cells, 0.9, SLO(ttft_ms=500))
    (tight,) = recommend_capacity(cells, 0.9, SLO(ttft_ms=100))
    assert loose.candidates[0].capacity == 2.0 and tight.candidates[0].capacity == 1.0


def test_nothing_meeting_the_target_is_said_and_exits_1(tmp_path, capsys) -> None:
    path = results_file(tmp_path / "r.json", [at(1, 1.0, 0.5), at(2, 1.0, 0.6), at(2, 2.0, 0.55)])
    parser = argparse.ArgumentParser()
    add_cli_args(parser)
    assert main(parser.parse_args([str(path), "--by", "capacity"])) == 1
    assert "NO batch size meets 90% at any load measured" in capsys.readouterr().out
    assert main(parser.parse_args([str(path), "--by", "capacity", "--target", "0.5"])) == 0
    out = capsys.readouterr().out
    assert "batch size 2" in out and "each workload's own SLOs" in out


def test_a_bad_target_and_slos_on_a_searched_capacity_are_refused() -> None:
    with pytest.raises(ValueError, match="target attainment must be in"):
        recommend_capacity([], target=0.0)
    with pytest.raises(ValueError, match="searched under its workload's SLOs"):
        recommend_capacity([searched(2, 3.0, 6.0)], 0.9, SLO(ttft_ms=100))


def with_policy(record: CellRecord, policy: str) -> CellRecord:
    record.cell["policy"] = policy
    record.cell["id"] += f"-pol{policy}"
    return record


def test_policies_compete_with_the_static_batch_sizes_for_the_most_capacity(tmp_path, capsys) -> None:
    """Issue 27: which policy and settings meet the SLOs at the highest load; each (policy, batch size) is a
    candidate of the group, the winner named with its policy."""
    cells = [at(4, 0.5, 0.97), at(4, 1.0, 0.92), at(4, 2.0, 0.50),  # fcfs bs 4: capacity 1
             at(8, 0.5, 0.95), at(8, 1.0, 0.60),  # fcfs bs 8: capacity 0.5
             *(with_policy(at(8, load, value), "aimd") for load, value in ((0.5, 0.99), (1.0, 0.95), (2.0, 0.91))),
             *(with_policy(at(8, load, value), "seed") for load, value in ((0.5, 0.70), (1.0, 0.40)))]
    (choice,) = recommend_capacity(cells, target=0.9)
    got = {(c.policy, c.batch_size): (c.capacity, c.verdict) for c in choice.candidates}
    assert got == {("fcfs", 4): (1.0, "less capacity than aimd bs 8"),
                   ("fcfs", 8): (0.5, "less capacity than aimd bs 8"),
                   ("aimd", 8): (2.0, "recommended"), ("seed", 8): (0.0, "no load measured meets 90%")}
    assert (choice.policy, choice.batch_size) == ("aimd", 8)
    path = results_file(tmp_path / "sweep.json", cells)
    parser = argparse.ArgumentParser()
    add_cli_args(parser)
    assert main(parser.parse_args([str(path), "--by", "capacity"])) == 0
    out = capsys.readouterr().out
    assert "policy aimd, batch size 8" in out and "seed" in out


def test_a_tie_between_a_policy_and_fcfs_goes_to_fcfs() -> None:
    cells = [at(4, 1.0, 0.95), with_policy(at(4, 1.0, 0.95), "aimd")]
    (choice,) = recommend_capacity(cells, target=0.9)
    assert (choice.policy, choice.batch_size) == ("fcfs", 4)
