"""The machine beside a verdict: probes read back, a cell's bound, and the note when the machine moved."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gate_samples import cell_info, copied, results_file, scaled

from batchperf.regress.gate import compare_cell
from batchperf.regress.machine import (
    PROBE_KEY,
    Bound,
    SessionProbes,
    bound_of,
    gaps_beyond,
    machine_moved,
    pooled_probes,
    session_probes,
    speed_gap,
)
from batchperf.regress.store import pool_runs
from batchperf.regress.verdict import Verdict
from batchperf.results.io import read_results
from batchperf.results.record import ResultsError
from batchperf.telemetry.probe import MachineProbe

QUIET = MachineProbe({"gemm_gflops": 60.0, "copy_gbps": 12.0, "interp_mops": 40.0})
BUSY = MachineProbe({"gemm_gflops": 40.0, "copy_gbps": 11.5, "interp_mops": 25.0})  # GEMM -33%, interpreter -37.5%


def with_probes(path: Path, probes: dict[str, object] | None) -> Path:
    results_file(path, [cell_info()])
    data = json.loads(path.read_text())
    if probes is not None:
        data["machine_info"][PROBE_KEY] = probes
    path.write_text(json.dumps(data))
    return path


def test_probes_are_read_back_from_a_results_file(tmp_path: Path) -> None:
    run = read_results(with_probes(tmp_path / "r.json", {"start": QUIET.to_dict(), "end": BUSY.to_dict()}))
    probes = session_probes(run)
    assert probes == SessionProbes(QUIET, BUSY)
    assert probes.figure("gemm_gflops") == 50.0  # the mean of start and end
    assert session_probes(read_results(with_probes(tmp_path / "old.json", None))) is None  # before the probe
    bad = read_results(with_probes(tmp_path / "bad.json", {"start": {"figures": {"gemm_gflops": 0}}}))
    with pytest.raises(ResultsError, match=r"bad.json: machine_info.batchperf_probe.start: probe figures.gemm_gflops "
                                           r"must be a finite number > 0"):
        session_probes(bad)
    missing = SessionProbes(MachineProbe({}, {"gemm_gflops": "ModuleNotFoundError: numpy"}))
    assert missing.figure("gemm_gflops") is None and missing.missing("gemm_gflops") == "ModuleNotFoundError: numpy"


def test_a_pooled_baseline_keeps_every_runs_probes_and_reads_their_mean(tmp_path: Path) -> None:
    slow = MachineProbe({"gemm_gflops": 20.0, "copy_gbps": 10.0, "interp_mops": 10.0})
    runs = [read_results(with_probes(tmp_path / "a.json", {"start": QUIET.to_dict(), "end": QUIET.to_dict()})),
            read_results(with_probes(tmp_path / "b.json", None)),  # a run from before the probe adds nothing
            read_results(with_probes(tmp_path / "c.json", {"start": BUSY.to_dict(), "end": slow.to_dict()}))]
    pooled = session_probes(pool_runs(runs))
    assert pooled == SessionProbes(QUIET, slow, between=(QUIET, BUSY))
    assert pooled.figure("gemm_gflops") == 45.0  # (60 + 60 + 40 + 20) / 4, not the first run's 60
    assert SessionProbes.from_dict(pooled.to_dict()) == pooled  # written and read back as it was
    assert pooled_probes([None, None]) is None and pooled_probes([SessionProbes(end=BUSY)]) == SessionProbes(BUSY)
    bad = read_results(with_probes(tmp_path / "bad.json", {"start": QUIET.to_dict(), "between": {"x": 1}}))
    with pytest.raises(ResultsError, match=r"bad.json: machine_info.batchperf_probe.between: is a dict, not a list"):
        session_probes(bad)

def test_a_cells_bound_comes_from_the_tokens_a_step_computes_and_its_roofline() -> None:
    small = cell_info()  # batch 4, prompt 64, outputs 16/32: 4 × 88 / 25 = 14 tokens per step
    assert bound_of(small)[0] is Bound.DISPATCH and "14 tokens per step" in bound_of(small)[1]
    prefill = copied(small)
    prefill.cell.update(batch_size=8, prompt_len="512")  # 8 × 536 / 25 = 172 tokens per step
    assert bound_of(prefill)[0] is Bound.GEMM
    counted = copied(small)
    counted.counters["iteration_tokens_mean"] = 300.0  # the engine's own count wins over the estimate
    assert bound_of(counted)[0] is Bound.GEMM
    streaming = copied(small)
    streaming.efficiency["decode_mbu"] = 0.6  # a decode at 60% of the peak bandwidth
    assert bound_of(streaming)[0] is Bound.BANDWIDTH
    streaming.efficiency["decode_mbu"] = 0.05  # the GPU waits on the host
    assert bound_of(streaming)[0] is Bound.DISPATCH


def regression() -> tuple[object, object]:
    base = cell_info()
    slow = scaled(base, 1.5)  # throughput -33%: beyond the CPU floor of 15%
    verdict = compare_cell("c", base, slow)
    assert verdict.verdict is Verdict.REGRESSION
    return verdict, slow


def test_a_regression_while_the_machine_was_slower_says_so() -> None:
    verdict, slow = regression()
    marked = machine_moved(verdict, slow, SessionProbes(QUIET, QUIET), BUSY)
    assert marked.verdict is Verdict.REGRESSION
    assert marked.notes[-1] == (
        "the machine itself measured 38% slower on interpreter than when the baseline was made (25 vs 40 Mops/s; the "
        "cell is dispatch-bound): beyond the 15% tolerance of output_throughput, so the machine, not the code, may "
        "explain this regression")
    judged = machine_moved(verdict, slow, SessionProbes(QUIET), BUSY, mode="not-judged")
    assert judged.verdict is Verdict.NOT_JUDGED and judged.notes[-1].endswith(
        "; not judged (--batchperf-machine-moved=not-judged)")


def test_a_machine_within_the_tolerance_or_a_regression_no_speed_explains_gets_no_note() -> None:
    verdict, slow = regression()
    steady = MachineProbe({"interp_mops": 36.0})  # 10% slower: within the 15% tolerance
    assert machine_moved(verdict, slow, SessionProbes(QUIET), steady) == verdict
    base = cell_info()
    kv = compare_cell("c", base, cell_info(kv=4096.0))  # KV bytes: exact, no machine speed moves them
    assert kv.verdict is Verdict.REGRESSION and machine_moved(kv, base, SessionProbes(QUIET), BUSY) == kv
    same = compare_cell("c", base, base)
    assert machine_moved(same, base, SessionProbes(QUIET), BUSY) == same
    with pytest.raises(ValueError, match="machine-moved mode must be one of mark, not-judged"):
        machine_moved(verdict, slow, None, None, mode="ignore")


def test_a_baseline_without_a_probe_leaves_it_unknown_and_says_why() -> None:
    verdict, slow = regression()
    marked = machine_moved(verdict, slow, None, BUSY)
    assert marked.verdict is Verdict.REGRESSION and marked.notes[-1] == (
        "whether the machine moved is unknown: the baseline has no interpreter probe (not probed (recorded before "
        "batchperf probed the machine))")
    lost = machine_moved(verdict, slow, SessionProbes(QUIET), MachineProbe({}, {"interp_mops": "a sandbox"}))
    assert lost.notes[-1] == "whether the machine moved is unknown: this run has no interpreter probe (a sandbox)"


def waiting(record: object, share: float) -> object:
    """``record`` whose threads waited for a CPU ``share`` of their runnable time."""
    out = copied(record)
    out.telemetry["cpu_wait_share"] = share
    return out


def test_a_regression_whose_threads_waited_for_a_cpu_says_so_though_the_probe_saw_nothing() -> None:
    verdict, slow = regression()
    base = waiting(cell_info(), 0.02)
    steady = MachineProbe({"interp_mops": 38.0})  # the probe caught a free core: 5% slower, within the tolerance
    busy = machine_moved(verdict, waiting(slow, 0.45), SessionProbes(QUIET), steady, baseline_record=base)
    assert busy.verdict is Verdict.REGRESSION and busy.notes[-1] == (
        "the machine itself measured busy: the cell's threads waited for a CPU 45% of the time they were ready to run "
        "(2% in the baseline), 44% less CPU than then: beyond the 15% tolerance of output_throughput, so the machine, "
        "not the code, may explain this regression")  # 1 - 0.55 / 0.98
    both = machine_moved(verdict, waiting(slow, 0.45), SessionProbes(QUIET), BUSY, mode="not-judged",
                         baseline_record=base)
    assert both.verdict is Verdict.NOT_JUDGED and "38% slower on interpreter" in both.notes[-1] \
        and "; and the machine itself measured busy: " in both.notes[-1]
    unprobed = machine_moved(verdict, waiting(slow, 0.45), None, None, baseline_record=base)
    assert unprobed.notes[-1].endswith("(no probe to compare: the baseline has no interpreter probe (not probed "
                                       "(recorded before batchperf probed the machine)))")
    # 10% waiting is 8% less CPU: within the tolerance; a baseline without the share says nothing of it
    assert machine_moved(verdict, waiting(slow, 0.10), SessionProbes(QUIET), steady, baseline_record=base) == verdict
    assert machine_moved(verdict, waiting(slow, 0.45), SessionProbes(QUIET), steady,
                         baseline_record=cell_info()) == verdict

def test_the_speed_gap_of_a_pair_is_b_against_a_on_the_figures_both_measured() -> None:
    a = SessionProbes(MachineProbe({"gemm_gflops": 100.0, "interp_mops": 20.0}),
                      MachineProbe({"gemm_gflops": 80.0, "interp_mops": 20.0}))  # mean GEMM 90
    b = SessionProbes(MachineProbe({"gemm_gflops": 99.0, "copy_gbps": 10.0}, {"interp_mops": "no clock"}))
    gaps = speed_gap(a, b)
    assert gaps == pytest.approx({"gemm_gflops": 0.1})  # copy: A has none; interpreter: B could not measure it
    assert speed_gap(a, None) == {} and speed_gap(None, b) == {}
    assert gaps_beyond({"gemm_gflops": 0.08, "interp_mops": -0.12, "copy_gbps": 0.01}, 0.03) == \
        "GEMM +8%, interpreter -12%"
    assert gaps_beyond({"copy_gbps": -0.03}, 0.03) == ""  # at the margin: not beyond it
