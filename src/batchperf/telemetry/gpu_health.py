"""The GPUs' state before a nightly run, read through NVML (the ``pynvml`` module of nvidia-ml-py).

Other processes on a GPU, clocks below their maximum (throttling), persistence
mode off (the first CUDA call pays for driver start-up) all make a night's
numbers noisy without any code change. The nightly job records them next to
the results (``batchperf gpu-health``) and warns; they are soft facts, never a
reason to skip. Without a GPU the record says so, so the CPU path produces the
same artifacts. Units are those ``nvidia-smi`` prints: MHz, W, °C, %, MiB.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

from batchperf.telemetry.nvml import IDLE, INSTALL_HINT, Nvml, Unavailable, open_nvml, text

MIB = 2**20


def collect(nvml_module: ModuleType | None = None) -> dict[str, Any]:
    """This machine's GPU health; ``{"gpu": false, "reason": ...}`` without nvidia-ml-py, a driver or a GPU.

    ``nvml_module`` stands in for ``pynvml`` (tests pass a fake)."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    nvml = open_nvml(nvml_module)
    if isinstance(nvml, Unavailable):
        if not nvml.installed:
            return _no_gpu(f"nvidia-ml-py is not installed ({INSTALL_HINT})", stamp)
        return _no_gpu(f"NVML did not start ({nvml.error})", stamp)
    with nvml:
        gpus = [_gpu(nvml, i) for i in range(nvml.lib.nvmlDeviceGetCount())]
    if not gpus:
        return _no_gpu("NVML sees no device", stamp)
    return {"gpu": True, "gpus": gpus, "warnings": [w for g in gpus for w in warnings(g)], "time": stamp}


def _no_gpu(why: str, stamp: str) -> dict[str, Any]:
    return {"gpu": False, "reason": f"no GPU: {why}", "time": stamp, "gpus": [], "warnings": []}


def _gpu(nvml: Nvml, index: int) -> dict[str, Any]:
    """One device's readings; a reading this device does not support is None."""
    lib = nvml.lib
    handle = nvml.handle(index)

    def read(fn: Callable[..., Any], *args: Any) -> Any:
        return nvml.read(fn, handle, *args)

    sm, mem = lib.NVML_CLOCK_SM, lib.NVML_CLOCK_MEM
    memory = read(lib.nvmlDeviceGetMemoryInfo)
    utilization = read(lib.nvmlDeviceGetUtilizationRates)
    persistence = read(lib.nvmlDeviceGetPersistenceMode)
    throttle = nvml.throttle_mask(handle)
    return {
        "index": index,
        "name": text(lib.nvmlDeviceGetName(handle)),
        "uuid": text(lib.nvmlDeviceGetUUID(handle)),
        "persistence_mode": "N/A" if persistence is None else (
            "Enabled" if persistence == lib.NVML_FEATURE_ENABLED else "Disabled"),
        "throttle_reasons": None if throttle is None else f"0x{throttle:016x}",
        "clocks_sm": _scaled(read(lib.nvmlDeviceGetClockInfo, sm)),
        "clocks_max_sm": _scaled(read(lib.nvmlDeviceGetMaxClockInfo, sm)),
        "clocks_mem": _scaled(read(lib.nvmlDeviceGetClockInfo, mem)),
        "clocks_max_mem": _scaled(read(lib.nvmlDeviceGetMaxClockInfo, mem)),
        "power_draw": _scaled(read(lib.nvmlDeviceGetPowerUsage), 1e-3),  # mW -> W
        "power_limit": _scaled(read(lib.nvmlDeviceGetPowerManagementLimit), 1e-3),
        "temperature_gpu": _scaled(read(lib.nvmlDeviceGetTemperature, lib.NVML_TEMPERATURE_GPU)),
        "utilization_gpu": None if utilization is None else float(utilization.gpu),
        "memory_used": None if memory is None else memory.used / MIB,
        "memory_total": None if memory is None else memory.total / MIB,
        "other_processes": [
            {"pid": int(p.pid), "name": _process_name(nvml, p.pid),
             "used_memory_mib": None if p.usedGpuMemory is None else p.usedGpuMemory / MIB}
            for p in read(lib.nvmlDeviceGetComputeRunningProcesses) or ()
        ],
    }


def warnings(gpu: dict[str, Any]) -> list[str]:
    """What about this GPU makes tonight's numbers noisier than they should be."""
    label = f"GPU {gpu['index']} ({gpu['name']})"
    out = []
    if others := gpu["other_processes"]:
        out.append(f"{label}: {len(others)} other process(es) on it: "
                   + ", ".join(f"{o['name']} (pid {o['pid']})" for o in others))
    if gpu["persistence_mode"] != "Enabled":
        out.append(f"{label}: persistence mode is {gpu['persistence_mode']}; `sudo nvidia-smi -pm 1` "
                   f"keeps the driver loaded between runs")
    # "GPU idle" is expected before a run; any other reason is power, thermal or an applied clock cap
    if gpu["throttle_reasons"] is not None and int(gpu["throttle_reasons"], 16) & ~IDLE:
        out.append(f"{label}: clocks throttled (reasons {gpu['throttle_reasons']})")
    return out


def _process_name(nvml: Nvml, pid: int) -> str:
    name = nvml.read(nvml.lib.nvmlSystemGetProcessName, pid)
    return "?" if name is None else text(name)


def _scaled(value: float | None, factor: float = 1.0) -> float | None:
    return None if value is None else value * factor
