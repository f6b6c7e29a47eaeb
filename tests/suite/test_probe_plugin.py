"""The machine probe beside a session: before the first cell and after the last, into machine_info; none without
cells."""

from __future__ import annotations

import json

import pytest

from batchperf.regress.machine import PROBE_KEY
from batchperf.suite import probe_plugin
from batchperf.suite.matrix import TIERS
from batchperf.telemetry.probe import MachineProbe

CELL = TIERS["cpu"].cells()[0].id
TESTS = """
def test_cell(batchperf_params, benchmark):
    benchmark(lambda: None)

def test_other(benchmark):
    benchmark(lambda: None)
"""


def fake_probes(monkeypatch: pytest.MonkeyPatch) -> list[MachineProbe]:
    made: list[MachineProbe] = []

    def fake() -> MachineProbe:
        made.append(MachineProbe({"gemm_gflops": 50.0 + len(made)}, {"copy_gbps": "no numpy"}))
        return made[-1]

    monkeypatch.setattr(probe_plugin, "probe", fake)
    return made


def test_a_session_with_cells_records_its_start_and_end_probes(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    made = fake_probes(monkeypatch)
    pytester.makepyfile(test_cells=TESTS)
    res = pytester.runpytest("-k", f"test_cell and {CELL}", "--benchmark-json=r.json", "-p", "no:cacheprovider")
    assert res.ret == 0 and len(made) == 2
    recorded = json.loads((pytester.path / "r.json").read_text())["machine_info"][PROBE_KEY]
    assert recorded == {"start": made[0].to_dict(), "end": made[1].to_dict()}
    assert recorded["start"]["missing"] == {"copy_gbps": "no numpy"}  # missing, with its reason, never 0


def test_a_session_without_cells_probes_nothing(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    made = fake_probes(monkeypatch)
    pytester.makepyfile(test_cells=TESTS)
    res = pytester.runpytest("-k", "test_other", "--benchmark-json=r.json", "-p", "no:cacheprovider")
    assert res.ret == 0 and made == []
    assert PROBE_KEY not in json.loads((pytester.path / "r.json").read_text())["machine_info"]
