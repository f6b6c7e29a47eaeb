"""The machine probe: figures > 0 or missing with the reason, never 0; a child that cannot run is an answer."""

from __future__ import annotations

import subprocess

import pytest

from batchperf.telemetry import probe as probe_mod
from batchperf.telemetry.probe import FIGURES, MachineProbe, measure_here, probe


def test_a_probe_holds_rates_above_zero_or_the_reason_it_has_none() -> None:
    good = MachineProbe({"gemm_gflops": 50.0}, {"copy_gbps": "MemoryError: "}, "2026-12-06T22:00:00+00:00", 0.8)
    assert MachineProbe.from_dict(good.to_dict()) == good
    assert good.get("gemm_gflops") == 50.0 and good.get("copy_gbps") is None
    assert good.describe() == "GEMM 50 GFLOP/s, memory copy missing (MemoryError: )"
    with pytest.raises(ValueError, match="figures.gemm_gflops must be a finite number > 0"):
        MachineProbe({"gemm_gflops": 0.0})  # a probe that could not run is missing, never 0
    with pytest.raises(ValueError, match="unknown figure 'flops'"):
        MachineProbe({"flops": 1.0})
    with pytest.raises(ValueError, match="missing names gemm_gflops, which figures also holds"):
        MachineProbe({"gemm_gflops": 1.0}, {"gemm_gflops": "no"})
    with pytest.raises(ValueError, match="figures and missing must be objects"):
        MachineProbe.from_dict({"figures": [1.0]})


def test_a_figure_that_fails_is_missing_with_its_reason_and_the_others_are_measured(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def no_numpy() -> float:
        raise ModuleNotFoundError("No module named 'numpy'")

    monkeypatch.setattr(probe_mod, "MEASURES", {"gemm_gflops": no_numpy, "copy_gbps": lambda: 0.0,
                                                "interp_mops": lambda: 12.5})
    assert measure_here() == {"figures": {"interp_mops": 12.5},
                              "missing": {"gemm_gflops": "ModuleNotFoundError: No module named 'numpy'",
                                          "copy_gbps": "measured 0.0, not a rate"}}


def test_a_child_that_cannot_start_or_finish_leaves_every_figure_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    def sandboxed(*args: object, **kwargs: object) -> None:
        raise PermissionError("fork is not allowed here")

    monkeypatch.setattr(subprocess, "run", sandboxed)
    got = probe()
    assert got.figures == {} and set(got.missing) == set(FIGURES)
    assert got.missing["gemm_gflops"] == "PermissionError: fork is not allowed here"

    def slow(*args: object, **kwargs: object) -> None:
        raise subprocess.TimeoutExpired("python", 20)

    monkeypatch.setattr(subprocess, "run", slow)
    assert probe(timeout_s=20).missing["copy_gbps"] == "the probe's child did not finish in 20 s"


def test_the_median_of_the_repeats_is_kept() -> None:
    seconds = iter([0.001, 0.04, 0.02, 0.02, 0.02, 0.01, 0.02, 0.02])  # warm-up, then seven repeats of 20 calls
    rate = probe_mod._median_rate(lambda calls: next(seconds), 1.0)
    assert rate == pytest.approx(20 / 0.02)  # the median repeat, not the best (0.01 s) nor the worst


def test_this_machine_is_probed_in_a_child_with_one_thread() -> None:
    got = probe()
    # on this machine numpy is installed and a child may start: every figure measured, each a rate > 0
    assert got.missing == {} and set(got.figures) == set(FIGURES) and all(v > 0 for v in got.figures.values())
    assert got.at and got.seconds > 0
