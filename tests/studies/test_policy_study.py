"""studies/policies/policy_study.py: the cells' order alternates between repeats; the static envelope is the best static cap
in each repeat; each target is judged on paired differences repeat by repeat (MET only when every repeat says so);
the old two-run layout is refused."""

from __future__ import annotations

import os

import pytest
from tool_module import tool_module

from batchperf.measure.trace import RequestTrace, RunTrace
from batchperf.results.record import CellRecord


@pytest.fixture(scope="module")
def tool():
    with tool_module("policy_study") as module:
        yield module


def row(policy: str, cap: int, load: float, att: float, tenants: dict | None = None, jain: float | None = None,
        repeat: int = 0):
    return {"repeat": repeat, "policy": policy, "cap": cap, "load": load, "attainment": att,
            "tenants": tenants or {}, "jain": jain, "starved": None, "state": {}, "id": f"{policy}-{cap}-{load}"}


def test_the_order_alternates_forward_reversed_and_names_one_file_per_repeat(tool, tmp_path) -> None:
    cells = ["a", "b", "c"]
    assert [tool.cell_order(cells, r) for r in range(4)] == [cells, cells[::-1], cells, cells[::-1]]
    assert tool.result_path(tmp_path, "poisson", "1.5", 0).name == "poisson-load1.5-r1.json"
    for r in (0, 1):
        tool.result_path(tmp_path, "poisson", "1.5", r).write_text("{}")
    (tmp_path / "bursty-load1-r1.json").write_text("{}")
    assert [(r, p.name) for r, p in tool.stored(tmp_path, "poisson")] == [
        (0, "poisson-load1.5-r1.json"), (1, "poisson-load1.5-r2.json")]


def test_the_run_has_every_cell_of_both_collections(tool) -> None:
    options = tool.matrix_options(tool.TRAFFIC["poisson"], "2.5", (1, 4), ("seed", "aimd"))
    assert "--batchperf-batch-sizes=1,4" in options["static"] and "--batchperf-policies=fcfs" in options["static"]
    assert "--batchperf-batch-sizes=16" in options["policies"]
    assert {"--batchperf-batch-sizes=1,4,16", "--batchperf-policies=fcfs,seed,aimd", "--batchperf-load=2.5"} <= set(
        options["both"])


def test_old_two_run_results_are_refused_with_the_fix(tool, tmp_path) -> None:
    (tmp_path / "poisson-static.json").write_text("{}")
    with pytest.raises(SystemExit, match="old layout.*move them out"):
        tool.stored(tmp_path, "poisson")


def two_repeats(aimd_by_repeat: dict[int, dict[float, float]]) -> list[dict]:
    """Static caps 4 and 16 at loads 1 and 2; repeat 1 drifts 20 points up; aimd as given."""
    data = []
    for r, shift in ((0, 0.0), (1, 0.2)):
        for x, by_cap in ((1.0, {4: 0.7, 16: 0.6}), (2.0, {4: 0.3, 16: 0.5})):
            data += [row("fcfs", c, x, a + shift, repeat=r) for c, a in by_cap.items()]
        data += [row("aimd", 16, x, a, repeat=r) for x, a in aimd_by_repeat[r].items()]
    return data


def test_the_envelope_is_per_repeat_and_aimd_is_judged_on_paired_differences(tool) -> None:
    # aimd follows the drift: 1 point under each repeat's envelope -> met, though 19 points under repeat 1's medians
    text, env, series = tool.table("poisson", two_repeats({0: {1.0: 0.69, 2.0: 0.49}, 1: {1.0: 0.89, 2.0: 0.69}}))
    assert env == {0: {1.0: 0.7, 2.0: 0.5}, 1: {1.0: pytest.approx(0.9), 2.0: pytest.approx(0.7)}}
    assert "| static 4 | 80.0 [70.0–90.0] |" in text
    assert series["fcfs"][2.0][1]["attainment"] == pytest.approx(0.7) == series["static 16"][2.0][1]["attainment"]
    (line,) = tool.judge("poisson", env, series)
    assert line.startswith("aimd within 3 points of the envelope at every load (aimd − that repeat's envelope): "
                           "MET in every repeat"), line
    assert "1: median -1.0 [-1.0, -1.0] over 2" in line


def test_a_repeat_that_misses_the_envelope_is_not_averaged_away(tool) -> None:
    # repeat 0: 5 points under at load 2; repeat 1: 1 over -> the median (−2) meets it, the repeats do not
    _, env, series = tool.table("poisson", two_repeats({0: {1.0: 0.7, 2.0: 0.45}, 1: {1.0: 0.9, 2.0: 0.71}}))
    (line,) = tool.judge("poisson", env, series)
    assert "NOT MET in every repeat (the medians meet it" in line, line
    assert "2: median -2.0 [-5.0, 1.0] over 2" in line
    _, env, series = tool.table("poisson", two_repeats({0: {1.0: 0.6, 2.0: 0.45}, 1: {1.0: 0.8, 2.0: 0.6}}))
    assert ": NOT MET (points" in tool.judge("poisson", env, series)[0]


def test_aimd_against_the_best_single_static_cap_is_paired_per_repeat(tool) -> None:
    # best single cap per repeat: 16 (means 0.55 / 0.75 against cap 4's 0.5 / 0.7); aimd 0.625 / 0.825
    data = two_repeats({0: {1.0: 0.65, 2.0: 0.6}, 1: {1.0: 0.85, 2.0: 0.8}})
    both = {"interactive": 0.9, "batch": 1.0}
    data = [{**r, "tenants": both} for r in data]
    _, env, series = tool.table("bursty", data)
    lines = tool.judge("bursty", env, series)
    (aimd,) = [line for line in lines if line.startswith("aimd >= 5 points")]
    assert "MET in every repeat (median 7.5; repeat 1: static 16, 7.5, repeat 2: static 16, 7.5)" in aimd, aimd
    data = two_repeats({0: {1.0: 0.65, 2.0: 0.6}, 1: {1.0: 0.75, 2.0: 0.8}})  # repeat 2: +2.5 only
    _, env, series = tool.table("bursty", data)
    assert "NOT MET (median 5.0; " in tool.judge("bursty", env, series)[0]


def test_priority_is_judged_in_the_repeats_where_fcfs_drops_the_interactive_tenant_below_80(tool) -> None:
    data = []
    for r, fcfs_i, prio_i in ((0, 0.7, 0.96), (1, 0.85, 0.5), (2, 0.6, 0.97)):
        data += [row("fcfs", c, 1.0, 0.8, {"interactive": fcfs_i, "batch": 1.0}, repeat=r) for c in (1, 16)]
        data += [row("priority", 16, 1.0, 0.97, {"interactive": prio_i, "batch": 0.9}, repeat=r)]
    _, env, series = tool.table("bursty", data)
    (line,) = [line for line in tool.judge("bursty", env, series) if line.startswith("priority")]
    # repeat 1 (fcfs 85%) is not where the target applies, so its 50% does not count
    assert line == ("priority at load 1, in the 2 of 3 repeats where fcfs gives interactive < 80% (70.0, 60.0): "
                    "interactive 96.0, 97.0 — MET in every one (>= 95%); cost: batch 90.0 [90.0–90.0]% vs fcfs "
                    "100.0 [100.0–100.0]%"), line


def test_fair_is_judged_by_jain_s_index_in_every_repeat(tool) -> None:
    data = [row("fcfs", 16, 4.0, 1.0, jain=0.72, repeat=r) for r in (0, 1)]
    data += [row("fair", 16, 4.0, 1.0, jain=j, repeat=r) for r, j in ((0, 0.93), (1, 0.91))]
    data += [row("fair-tenant_cap8", 16, 4.0, 1.0, jain=j, repeat=r) for r, j in ((0, 0.95), (1, 0.88))]
    _, env, series = tool.table("backlogged", data)
    lines = tool.judge("backlogged", env, series)
    assert "fair at load 4: Jain 0.930, 0.910 (repeats) vs fcfs 0.720, 0.720 — MET in every repeat (>= 0.9)" in lines
    assert ("fair-tenant_cap8 at load 4: Jain 0.950, 0.880 (repeats) vs fcfs 0.720, 0.720 — NOT MET (>= 0.9)"
            in lines)


def test_the_table_s_median_pools_every_round_of_every_repeat_and_its_spread_is_the_repeats(tool) -> None:
    data = [{**row("fcfs", 16, 1.0, 0.6, repeat=0), "rounds": [0.5, 0.6, 0.7]},
            {**row("fcfs", 16, 1.0, 0.95, repeat=1), "rounds": [0.9, 0.95, 1.0]}]
    text, _, _ = tool.table("poisson", data)
    assert "| static 16 | 80.0 [60.0–95.0] |" in text, text  # median of the six rounds; min–max of the two medians


def test_each_round_s_attainment_is_recomputed_from_its_trace_counting_what_never_came_back(tool) -> None:
    def trace(*ttfts: float) -> dict:
        requests = [RequestTrace(i, 8, 2, 0.0, 0.0, (t, t + 0.01), tenant="t") for i, t in enumerate(ttfts)]
        return RunTrace("continuous", 16, 2, requests, end=1.0).to_dict()

    record = CellRecord(cell={"id": "x"}, model={}, metrics={}, rounds=[], kv={},
                        traces=[trace(0.1, 0.4), trace(0.1, 0.2), trace(0.1)], slo={"attainment": 0.5},
                        tenants={"t": {"attainment": 0.5, "offered": 2}},
                        workload={"slos": {"t": {"ttft_ms": 250.0, "tpot_ms": None, "e2el_ms": None}}})
    assert tool.round_attainments(record) == [0.5, 1.0, 0.5]  # the third round lost a request: a miss
    assert tool.round_attainments(CellRecord(cell={"id": "x"}, model={}, metrics={}, rounds=[], kv={},
                                             slo={"attainment": 0.7})) == [0.7]  # no traces: the cell's median


def test_it_runs_in_its_checkout_from_any_folder_and_writes_out_where_it_was_given(
        tool, tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """It had to run from the repository root (its suite, traffic files and node ids are relative to it): from
    another folder pytest said `file or directory not found: perf_tests`."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.argv", ["policy_study.py", "--out", "study", "--report-only"])
    assert tool.main() == 0
    assert os.getcwd() == str(tool.ROOT) and (tool.ROOT / "perf_tests").is_dir()
    assert (tmp_path / "study" / "study.md").exists()  # --out from where it was given, not from the root
