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

MIB = 2**20
# Throttle reasons that are not throttling: none, and "GPU idle", expected before a run. Anything else is
# power, thermal or an applied clock cap.
NOT_THROTTLED = (0x0, 0x1)
# NVML's clocks-event (throttle) reason bits (nvml.h, nvmlClocksEventReason*)
THROTTLE_BITS = {0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
                 0x10: "sync_boost", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown",
                 0x80: "hw_power_brake_slowdown", 0x100: "display_clock_setting"}


def throttle_names(mask: int) -> list[str]:
    """The names of the reasons set in an NVML throttle mask (unknown bits as hex)."""
    names = [name for bit, name in THROTTLE_BITS.items() if mask & bit]
    if rest := mask & ~sum(THROTTLE_BITS):
        names.append(f"0x{rest:x}")
    return names


def throttle_reasons(nvml: Any, handle: Any) -> int:
    """The device's current throttle mask (NVML renamed the call "clocks event reasons"; either will do)."""
    read = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or nvml.nvmlDeviceGetCurrentClocksThrottleReasons
    return int(read(handle))


def collect(nvml_module: ModuleType | None = None) -> dict[str, Any]:
    """This machine's GPU health; ``{"gpu": false, "reason": ...}`` without nvidia-ml-py, a driver or a GPU.

    ``nvml_module`` stands in for ``pynvml`` (tests pass a fake)."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    try:
        nvml = nvml_module
        if nvml is None:
            import pynvml as nvml
    except ImportError:
        return _no_gpu("nvidia-ml-py is not installed (pip install nvidia-ml-py)", stamp)
    try:
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return _no_gpu(f"NVML did not start ({exc})", stamp)
    try:
        gpus = [_gpu(nvml, i) for i in range(nvml.nvmlDeviceGetCount())]
    finally:
        _try(nvml, nvml.nvmlShutdown)
    if not gpus:
        return _no_gpu("NVML sees no device", stamp)
    return {"gpu": True, "gpus": gpus, "warnings": [w for g in gpus for w in warnings(g)], "time": stamp}


def _no_gpu(why: str, stamp: str) -> dict[str, Any]:
    return {"gpu": False, "reason": f"no GPU: {why}", "time": stamp, "gpus": [], "warnings": []}


def _gpu(nvml: Any, index: int) -> dict[str, Any]:
    """One device's readings; a reading this device does not support is None."""
    handle = nvml.nvmlDeviceGetHandleByIndex(index)

    def read(fn: Callable[..., Any], *args: Any) -> Any:
        return _try(nvml, fn, handle, *args)

    sm, mem = nvml.NVML_CLOCK_SM, nvml.NVML_CLOCK_MEM
    memory = read(nvml.nvmlDeviceGetMemoryInfo)
    utilization = read(nvml.nvmlDeviceGetUtilizationRates)
    persistence = read(nvml.nvmlDeviceGetPersistenceMode)
    throttle = _try(nvml, throttle_reasons, nvml, handle)
    return {
        "index": index,
        "name": _text(nvml.nvmlDeviceGetName(handle)),
        "uuid": _text(nvml.nvmlDeviceGetUUID(handle)),
        "persistence_mode": "N/A" if persistence is None else (
            "Enabled" if persistence == nvml.NVML_FEATURE_ENABLED else "Disabled"),
        "throttle_reasons": None if throttle is None else f"0x{throttle:016x}",
        "clocks_sm": _scaled(read(nvml.nvmlDeviceGetClockInfo, sm)),
        "clocks_max_sm": _scaled(read(nvml.nvmlDeviceGetMaxClockInfo, sm)),
        "clocks_mem": _scaled(read(nvml.nvmlDeviceGetClockInfo, mem)),
        "clocks_max_mem": _scaled(read(nvml.nvmlDeviceGetMaxClockInfo, mem)),
        "power_draw": _scaled(read(nvml.nvmlDeviceGetPowerUsage), 1e-3),  # mW -> W
        "power_limit": _scaled(read(nvml.nvmlDeviceGetPowerManagementLimit), 1e-3),
        "temperature_gpu": _scaled(read(nvml.nvmlDeviceGetTemperature, nvml.NVML_TEMPERATURE_GPU)),
        "utilization_gpu": None if utilization is None else float(utilization.gpu),
        "memory_used": None if memory is None else memory.used / MIB,
        "memory_total": None if memory is None else memory.total / MIB,
        "other_processes": [
            {"pid": int(p.pid), "name": _process_name(nvml, p.pid),
             "used_memory_mib": None if p.usedGpuMemory is None else p.usedGpuMemory / MIB}
            for p in read(nvml.nvmlDeviceGetComputeRunningProcesses) or ()
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
    if gpu["throttle_reasons"] is not None and int(gpu["throttle_reasons"], 16) not in NOT_THROTTLED:
        out.append(f"{label}: clocks throttled (reasons {gpu['throttle_reasons']})")
    return out


def _process_name(nvml: Any, pid: int) -> str:
    name = _try(nvml, nvml.nvmlSystemGetProcessName, pid)
    return "?" if name is None else _text(name)


def _try(nvml: Any, fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return fn(*args)
    except nvml.NVMLError:  # "Not Supported" on this device, or no permission: the reading is absent
        return None


def _scaled(value: float | None, factor: float = 1.0) -> float | None:
    return None if value is None else value * factor


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
