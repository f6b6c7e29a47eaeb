"""The tests' one stand-in for ``pynvml``: devices as dicts of readings, so no test needs a GPU.

Pass it where a module is taken (``open_nvml(fake)``, ``Sampler(nvml_module=fake)``, ``collect(fake)``), or put
it in ``sys.modules["pynvml"]`` where the code imports pynvml itself (the fingerprint, the CLI).

A device is a dict; its keys are the readings below (``memory_used`` and ``memory_total`` in bytes, power in mW,
clocks in MHz). A reading left out answers NVMLError("Not Supported"), as on a device without it. A list is a
series: each read takes the next value and the last one repeats; an exception in it is raised when reached
(``[1000, 1000, NVMLError("GPU is lost")]``: the device falls off the bus at the third read).
"""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace
from typing import Any


class NVMLError(Exception):
    pass


class FakeNvml:
    NVMLError = NVMLError
    NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 1, 2, 0
    NVML_FEATURE_DISABLED, NVML_FEATURE_ENABLED = 0, 1

    def __init__(self, devices: list[dict[str, Any]] | None = None,
                 processes: dict[int, list[tuple[int, int | None]]] | None = None,
                 process_names: dict[int, str] | None = None, init_error: str | None = None,
                 driver: str = "570.1", cuda_driver: int = 12080) -> None:
        self.devices = devices or []
        self.processes = processes or {}  # device index -> (pid, used bytes or None) of each process on it
        self.process_names = process_names or {}  # pid -> name; another pid is NVMLError("Not Found")
        self.init_error = init_error  # nvmlInit raises NVMLError(init_error), as without a driver
        self.driver, self.cuda_driver = driver, cuda_driver
        self.reads: Counter[tuple[int, str]] = Counter()  # (device, reading) -> times read
        self.shutdowns = 0

    # -- the library
    def nvmlInit(self) -> None:
        if self.init_error:
            raise NVMLError(self.init_error)

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return self.cuda_driver

    def nvmlSystemGetProcessName(self, pid: int) -> str:
        if pid not in self.process_names:
            raise NVMLError("Not Found")
        return self.process_names[pid]

    # -- finding a device; a handle is the device's index in ``devices``
    def nvmlDeviceGetCount(self) -> int:
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        if not 0 <= index < len(self.devices):
            raise NVMLError("Invalid Argument")
        return index

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> int:
        for index, device in enumerate(self.devices):
            if device.get("uuid") == uuid:
                return index
        raise NVMLError("Not Found")

    # -- readings
    def _get(self, handle: int, key: str) -> Any:
        series = self.devices[handle].get(key)
        if series is None:
            raise NVMLError("Not Supported")
        n = self.reads[handle, key]
        self.reads[handle, key] += 1
        value = series[min(n, len(series) - 1)] if isinstance(series, list) else series
        if isinstance(value, Exception):
            raise value
        return value

    def times_read(self, key: str, handle: int = 0) -> int:
        """How many times ``key`` of a device was read."""
        return self.reads[handle, key]

    def nvmlDeviceGetName(self, h: int) -> str | bytes:
        return self._get(h, "name")  # bytes in a device dict: as older nvidia-ml-py returns it

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return self._get(h, "uuid")

    def nvmlDeviceGetCudaComputeCapability(self, h: int) -> tuple[int, int]:
        return self._get(h, "compute_capability")  # (major, minor), as nvidia-ml-py returns it

    def nvmlDeviceGetMemoryInfo(self, h: int) -> SimpleNamespace:
        return SimpleNamespace(used=self._get(h, "memory_used"), total=self.devices[h].get("memory_total", 0))

    def nvmlDeviceGetUtilizationRates(self, h: int) -> SimpleNamespace:
        return SimpleNamespace(gpu=self._get(h, "util"), memory=0)

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return self._get(h, "power_mw")

    def nvmlDeviceGetPowerManagementLimit(self, h: int) -> int:
        return self._get(h, "power_limit_mw")

    def nvmlDeviceGetEnforcedPowerLimit(self, h: int) -> int:
        return self._get(h, "enforced_power_limit_mw")

    def nvmlDeviceGetTotalEnergyConsumption(self, h: int) -> int:
        return self._get(h, "energy_mj")

    def nvmlDeviceGetClockInfo(self, h: int, clock: int) -> int:
        return self._get(h, {self.NVML_CLOCK_SM: "clock_sm", self.NVML_CLOCK_MEM: "clock_mem"}[clock])

    def nvmlDeviceGetMaxClockInfo(self, h: int, clock: int) -> int:
        return self._get(h, {self.NVML_CLOCK_SM: "max_clock_sm", self.NVML_CLOCK_MEM: "max_clock_mem"}[clock])

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        assert sensor == self.NVML_TEMPERATURE_GPU
        return self._get(h, "temperature")

    def nvmlDeviceGetPersistenceMode(self, h: int) -> int:
        return self._get(h, "persistence")

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h: int) -> int:
        # the call's older name only: the reader must fall back to it
        return self._get(h, "throttle")

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[SimpleNamespace]:
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in self.processes.get(h, [])]
