"""What a ``batchperf ab`` run holds and writes (``batchperf.ab.result``): a pair, the run and its exit code, and how a
run ended (:class:`Ended`), each against hand-computed values."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
from ab_fakes import fingerprint

from batchperf.ab.cell import CellState
from batchperf.ab.env import Environment, Probe, SideRun
from batchperf.ab.result import AbResult, Ended, Pair, exit_code
from batchperf.ab.settings import Settings
from batchperf.ab.stats import SequentialTest
from batchperf.regress.machine import SessionProbes
from batchperf.regress.verdict import Verdict
from batchperf.telemetry.probe import MachineProbe

TEST = SequentialTest("signed-rank", level=0.01)


def run_settings(**kwargs: object) -> Settings:
    base = {"a": Environment("A", Path("/py/a"), (("X", "1"),)), "b": Environment("B", Path("/py/b"), (("Y", "2"),)),
            "pytest_args": ("-m", "cpu"), "out": Path("/tmp/ab")}
    return Settings(**{**base, **kwargs})  # type: ignore[arg-type]


def run_result(cells: dict[str, CellState] | None = None, **kwargs: object) -> AbResult:
    probes = {label: Probe(fingerprint(**({"vllm": "0.32.0"} if label == "B" else {})), "src/batchperf/__init__.py", "")
              for label in ("A", "B")}
    return AbResult(run_settings(), probes, TEST, "how the level was found", cells or {},
                    **kwargs)  # type: ignore[arg-type]


def test_a_pair_records_each_side_s_files_and_seconds() -> None:
    runs = {"B": SideRun("B", 0, 12.345, Path("/o/pair-002-B.json"), Path("/o/pair-002-B.log"), started=5.0),
            "A": SideRun("A", 3, 1.0, None, Path("/o/pair-002-A.log"))}
    saved = Pair(2, ("B", "A"), runs, 0.5).to_dict()
    assert saved == {"index": 2, "order": ["B", "A"], "load_avg_1m": 0.5,
                     "B": {"results": "/o/pair-002-B.json", "log": "/o/pair-002-B.log", "seconds": 12.35,
                           "returncode": 0, "started": 5.0},
                     "A": {"results": None, "log": "/o/pair-002-A.log", "seconds": 1.0, "returncode": 3,
                           "started": 0.0}}


def test_a_pair_keeps_each_probed_side_s_machine_probes_and_only_those() -> None:
    runs = {label: SideRun(label, 0, 1.0, Path(f"/o/pair-001-{label}.json"), Path(f"/o/pair-001-{label}.log"))
            for label in ("A", "B")}
    probe = MachineProbe({"gemm_gflops": 90.0}, {"copy_gbps": "no numpy"}, at="2026-12-06T23:00:00Z", seconds=0.5)
    saved = Pair(1, ("A", "B"), runs, None, machine={"B": SessionProbes(start=probe)}).to_dict()
    assert saved["B"]["probe"] == {"start": {"figures": {"gemm_gflops": 90.0}, "missing": {"copy_gbps": "no numpy"},
                                             "at": "2026-12-06T23:00:00Z", "seconds": 0.5}}
    assert "probe" not in saved["A"]  # not probed (a results file made before batchperf probed): no block, not 0
    assert SessionProbes.from_dict(saved["B"]["probe"]) == SessionProbes(start=probe)


@pytest.mark.parametrize("verdicts, status, code", [
    ([Verdict.NO_CHANGE, Verdict.IMPROVEMENT], "done", 0),
    ([Verdict.NO_CHANGE, Verdict.REGRESSION], "done", 1),
    ([Verdict.REGRESSION, Verdict.FAILED], "failed", 1),  # a measured regression outranks a failure elsewhere
    ([Verdict.NO_CHANGE, Verdict.INCONCLUSIVE], "budget", 2),
    ([Verdict.INCONCLUSIVE, Verdict.FAILED], "budget", 4),
    ([Verdict.NOT_JUDGED], "done", 4),
    ([Verdict.NO_CHANGE], "failed", 4),
    ([Verdict.REGRESSION], "interrupted", 130),  # interrupted: whatever was found, the signal's code
])
def test_the_exit_code(verdicts: list[Verdict], status: str, code: int) -> None:
    cells = {f"c{i}": CellState(f"c{i}", f"n{i}", verdict=v) for i, v in enumerate(verdicts)}
    result = run_result(cells, status=status)
    assert exit_code(result) == result.exit_code == code
    result.stop_signal = signal.SIGTERM
    assert result.exit_code == (143 if status == "interrupted" else code)


def test_ab_json_holds_the_run_the_environments_and_what_differs_between_them() -> None:
    cells = {"c1": CellState("c1", "n1", verdict=Verdict.REGRESSION, settled_at=6)}
    result = run_result(cells, status="done", elapsed_s=61.26, started=0.0)
    result.pairs.extend(Pair(i, ("A", "B"), {}, load) for i, load in ((1, 0.5), (2, None), (3, 1.5), (4, 1.0)))
    saved = json.loads(json.dumps(result.to_dict()))  # what ab.json holds is plain JSON
    assert saved["batchperf_ab"] == 2 and saved["status"] == "done" and saved["exit_code"] == 1
    assert saved["started"] == "1970-01-01T00:00:00+00:00" and saved["elapsed_s"] == 61.3
    assert saved["settings"]["test"] == "signed-rank" and saved["settings"]["per_look_level"] == 0.01
    assert saved["settings"]["t_boundaries"] is None and saved["settings"]["level_method"] == "how the level was found"
    assert saved["versions_differ"] == {"vllm": ["-", "0.32.0"]}
    assert saved["vars_differ"] == {"X": ["1", "-"], "Y": ["-", "2"]}
    assert saved["load_avg_1m"] == {"min": 0.5, "median": 1.0, "max": 1.5}  # pair 2 had no reading
    assert saved["environments"]["B"]["vars"] == {"Y": "2"} and saved["environments"]["A"]["python"] == "/py/a"
    assert [p["index"] for p in saved["pairs"]] == [1, 2, 3, 4] and saved["cells"][0]["settled_at"] == 6
    assert saved["warmup"] is None and saved["rounds"] is None and saved["minutes_needed"] is None


@pytest.mark.parametrize("kwargs, message", [
    ({"status": "running"}, "status: 'running'; must be one of done, budget, interrupted, failed"),
    ({"status": "failed"}, "reason: empty for status 'failed'"),
    ({"status": "interrupted", "reason": "Ctrl-C"}, "stop_signal: None with status 'interrupted'"),
    ({"status": "done", "stop_signal": 2}, "stop_signal: 2 with status 'done'"),
])
def test_an_ending_that_cannot_be_is_refused_naming_the_field(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        Ended(**kwargs)
    assert message in str(caught.value)


def test_an_ending_says_why_and_what_would_have_been_enough() -> None:
    assert Ended("done") == Ended("done", "", None, None)
    stop = Ended("budget", "--max-minutes 10: 3 pair(s) fit", minutes_needed=18)
    assert (stop.status, stop.minutes_needed) == ("budget", 18)
    with pytest.raises(AttributeError):
        stop.status = "done"  # type: ignore[misc]  # frozen: how a stage ended is not edited afterwards
