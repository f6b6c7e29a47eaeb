"""GPU health through NVML, against a fake pynvml module; a clear "no GPU" record without NVML."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from fake_nvml import FakeNvmlLibrary

from batchperf.cli.gpu_health import main
from batchperf.measure.gpu_health import collect

MIB = 2**20


class FakeNvml(FakeNvmlLibrary):
    """Just enough of pynvml: one dict of readings per device; a reading left out is "Not Supported"."""

    NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 1, 2, 0
    NVML_FEATURE_DISABLED, NVML_FEATURE_ENABLED = 0, 1

    def __init__(self, devices: list[dict], processes: dict[int, list[tuple[int, int | None]]] | None = None,
                 names: dict[int, str] | None = None, init_error: str | None = None) -> None:
        super().__init__(init_error)
        self.devices = devices
        self.processes = processes or {}  # device index -> (pid, used bytes)
        self.names = names or {}

    def nvmlDeviceGetCount(self) -> int:
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def _get(self, handle: int, key: str):
        value = self.devices[handle].get(key)
        if value is None:
            raise self.NVMLError("Not Supported")
        return value

    def nvmlDeviceGetName(self, h: int) -> bytes:
        return self._get(h, "name").encode()  # older nvidia-ml-py returns bytes

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return self._get(h, "uuid")

    def nvmlDeviceGetPersistenceMode(self, h: int) -> int:
        return self._get(h, "persistence")

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h: int) -> int:
        return self._get(h, "throttle")

    def nvmlDeviceGetClockInfo(self, h: int, clock: int) -> int:
        return self._get(h, {self.NVML_CLOCK_SM: "sm", self.NVML_CLOCK_MEM: "mem"}[clock])

    def nvmlDeviceGetMaxClockInfo(self, h: int, clock: int) -> int:
        return self._get(h, {self.NVML_CLOCK_SM: "max_sm", self.NVML_CLOCK_MEM: "max_mem"}[clock])

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return self._get(h, "power_mw")

    def nvmlDeviceGetPowerManagementLimit(self, h: int) -> int:
        return self._get(h, "limit_mw")

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        assert sensor == self.NVML_TEMPERATURE_GPU
        return self._get(h, "temp")

    def nvmlDeviceGetUtilizationRates(self, h: int) -> SimpleNamespace:
        return SimpleNamespace(gpu=self._get(h, "util"), memory=0)

    def nvmlDeviceGetMemoryInfo(self, h: int) -> SimpleNamespace:
        return SimpleNamespace(used=self._get(h, "used_mib") * MIB, total=self._get(h, "total_mib") * MIB)

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[SimpleNamespace]:
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in self.processes.get(h, [])]

    def nvmlSystemGetProcessName(self, pid: int) -> str:
        if pid not in self.names:
            raise self.NVMLError("Not Found")
        return self.names[pid]


H100 = "NVIDIA H100 80GB HBM3"
IDLE = {"name": H100, "uuid": "GPU-aaa", "persistence": 1, "throttle": 0x1, "sm": 1980, "max_sm": 1980,
        "mem": 2619, "max_mem": 2619, "power_mw": 71_200, "limit_mw": 700_000, "temp": 34, "util": 0,
        "used_mib": 1, "total_mib": 81559}
BUSY = {**IDLE, "uuid": "GPU-bbb", "persistence": 0, "throttle": 0x20, "sm": 1410, "power_mw": 301_500, "temp": 81,
        "util": 97, "used_mib": 40210}


def two_gpus() -> FakeNvml:
    return FakeNvml([IDLE, BUSY], processes={1: [(4242, 40200 * MIB)]}, names={4242: "python3"})


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
