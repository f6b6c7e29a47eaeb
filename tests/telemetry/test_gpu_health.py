"""GPU health through NVML, against a fake pynvml module; a clear "no GPU" record without NVML."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest
from fake_nvml import FakeNvml

from batchperf.cli.gpu_health import main
from batchperf.telemetry.gpu_health import collect

MIB = 2**20
H100 = "NVIDIA H100 80GB HBM3"
IDLE = {"name": H100.encode(),  # bytes, as older nvidia-ml-py returns it
        "uuid": "GPU-aaa", "persistence": 1, "throttle": 0x1, "clock_sm": 1980, "max_clock_sm": 1980,
        "clock_mem": 2619, "max_clock_mem": 2619, "power_mw": 71_200, "power_limit_mw": 700_000, "temperature": 34,
        "util": 0, "memory_used": 1 * MIB, "memory_total": 81559 * MIB}
BUSY = {**IDLE, "uuid": "GPU-bbb", "persistence": 0, "throttle": 0x20, "clock_sm": 1410, "power_mw": 301_500,
        "temperature": 81, "util": 97, "memory_used": 40210 * MIB}


def two_gpus() -> FakeNvml:
    return FakeNvml([IDLE, BUSY], processes={1: [(4242, 40200 * MIB)]}, process_names={4242: "python3"})


def test_flags_other_processes_persistence_and_throttling() -> None:
    nvml = two_gpus()
    health = collect(nvml)
    assert health["gpu"] is True and [g["index"] for g in health["gpus"]] == [0, 1]
    idle, busy = health["gpus"]
    assert idle == {
        "index": 0, "name": H100, "uuid": "GPU-aaa", "persistence_mode": "Enabled",
        "throttle_reasons": "0x0000000000000001", "clocks_sm": 1980.0, "clocks_max_sm": 1980.0, "clocks_mem": 2619.0,
        "clocks_max_mem": 2619.0, "power_draw": pytest.approx(71.2), "power_limit": 700.0, "temperature_gpu": 34.0,
        "utilization_gpu": 0.0, "memory_used": 1.0, "memory_total": 81559.0, "other_processes": [],
    }
    assert busy["other_processes"] == [{"pid": 4242, "name": "python3", "used_memory_mib": 40200.0}]
    assert busy["throttle_reasons"] == "0x0000000000000020" and busy["persistence_mode"] == "Disabled"
    assert health["warnings"] == [
        f"GPU 1 ({H100}): 1 other process(es) on it: python3 (pid 4242)",
        f"GPU 1 ({H100}): persistence mode is Disabled; `sudo nvidia-smi -pm 1` keeps the driver "
        "loaded between runs",
        f"GPU 1 ({H100}): clocks throttled (reasons 0x0000000000000020)",
    ]
    assert nvml.shutdowns == 1
    json.dumps(health)  # what the CLI writes


def test_readings_a_device_does_not_support_are_absent_not_fatal() -> None:
    bare = {"name": "Tesla K80", "uuid": "GPU-ccc"}  # every other reading raises "Not Supported"
    health = collect(FakeNvml([bare], processes={0: [(7, None)]}))
    (gpu,) = health["gpus"]
    assert gpu["clocks_sm"] is None and gpu["memory_used"] is None and gpu["throttle_reasons"] is None
    assert gpu["other_processes"] == [{"pid": 7, "name": "?", "used_memory_mib": None}]  # as on MIG
    assert health["warnings"] == [
        "GPU 0 (Tesla K80): 1 other process(es) on it: ? (pid 7)",
        "GPU 0 (Tesla K80): persistence mode is N/A; `sudo nvidia-smi -pm 1` keeps the driver loaded between runs",
    ]


@pytest.mark.parametrize(("nvml", "reason"), [
    (FakeNvml([], init_error="NVML Shared Library Not Found"),
     "no GPU: NVML did not start (NVML Shared Library Not Found)"),
    (FakeNvml([]), "no GPU: NVML sees no device"),
])
def test_without_a_gpu_the_record_says_why(nvml: FakeNvml, reason: str) -> None:
    health = collect(nvml)
    assert health["gpu"] is False and health["reason"] == reason and health["gpus"] == []


def test_cli_writes_the_record_and_prints_the_warnings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", two_gpus())
    out = tmp_path / "nightly" / "gpu-health.json"
    assert main(argparse.Namespace(out=out)) == 0
    assert len(json.loads(out.read_text())["gpus"]) == 2
    printed = capsys.readouterr().out
    assert f"2 GPU(s) -> {out}" in printed and printed.count("warning: ") == 3


def test_without_nvidia_ml_py_the_record_says_no_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # `import pynvml` now raises ImportError
    out = tmp_path / "health.json"
    assert main(argparse.Namespace(out=out)) == 0
    health = json.loads(out.read_text())
    assert health["gpu"] is False and health["reason"].startswith("no GPU: nvidia-ml-py is not installed")
