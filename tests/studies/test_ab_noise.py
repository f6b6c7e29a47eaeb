"""studies/ab-noise/ab_noise.py's arithmetic: the random-effects decomposition recovers known levels of noise, and a process's
seconds split into phases that add up to its wall time. (The measurement itself, real processes, is not run here.)"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from tool_module import tool_module


@pytest.fixture(scope="module")
def tool():
    with tool_module("ab_noise") as module:
        yield module


@pytest.mark.parametrize(("between", "within"), [(0.05, 0.02), (0.02, 0.05), (0.0, 0.03)])
def test_the_decomposition_recovers_known_levels(tool, between: float, within: float) -> None:
    rng = np.random.default_rng(3)
    groups = [list(rng.normal(rng.normal(0, between), within, rng.integers(3, 7))) for _ in range(600)]
    d = tool.decompose(groups)
    assert d["within"] == pytest.approx(within, rel=0.05)
    assert d["between"] == pytest.approx(between, abs=0.006)


def test_a_process_s_phases_add_up_to_its_wall_time(tool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stem = tmp_path / "dispatch-000"
    t0 = 1000.0
    stem.with_suffix(".run.json").write_text(json.dumps({"started": t0, "seconds": 20.0}))
    stem.with_suffix(".phases.json").write_text(json.dumps({
        "process_start": t0 + 0.2, "plugin_imported": t0 + 0.7, "configured": t0 + 1.5, "collection_start": t0 + 1.6,
        "collection_finish": t0 + 1.7, "unconfigure": t0 + 18.0, "collected": 1,
        "tests": [{"setup_start": t0 + 1.7, "setup_end": t0 + 12.0, "call_start": t0 + 12.0, "call_end": t0 + 17.0,
                   "teardown_end": t0 + 17.1}]}))
    stem.with_suffix(".json").write_text(json.dumps({"benchmarks": [{"stats": {"total": 3.0}}]}))

    class Record:
        rounds = [{"output_throughput": 100.0}, {"output_throughput": 110.0}]

    monkeypatch.setattr(tool, "read_results", lambda path: type("R", (), {"records": [Record()]})())
    logs, seconds = tool.load(stem)
    assert logs == pytest.approx([np.log(100.0), np.log(110.0)])
    assert sum(seconds[p] for p in tool.PHASES) == pytest.approx(seconds["total"]) == pytest.approx(20.0)
    assert seconds["measured rounds"] == 3.0 and seconds["warm-up + record"] == pytest.approx(2.0)
    assert seconds["exit"] == pytest.approx(2.0) and seconds["model build + backend (set-up)"] == pytest.approx(10.3)
    assert tool.finished(tmp_path, "dispatch") == [stem]
