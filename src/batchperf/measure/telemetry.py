"""Telemetry of one cell: a background thread that samples the GPU (NVML) and the process.

``with Sampler(device) as s: run the cell`` then ``s.summary(output_tokens)``
gives a flat dict for the cell's results:

- always: ``samples``, ``interval_s``, ``duration_s``, ``cell_peak_rss_bytes``,
  the largest process RSS sampled during the cell, ``process_peak_rss_bytes``,
  the process's lifetime peak (``ru_maxrss``: it includes every cell and load
  before this one, so it cannot tell one cell from another), and
  ``sampler_cpu_s``, the CPU time the sampling thread itself used;
- on CUDA: ``torch_peak_allocated_bytes`` / ``torch_peak_reserved_bytes``
  (torch's peaks, reset when the cell starts), and through NVML (the
  ``pynvml`` module of nvidia-ml-py) the device's memory used, utilisation,
  power, and energy from the total-energy counter (``joules_per_output_token``);
  and, as soft facts that explain a slow cell but are never gated, the SM clock
  (``sm_clock_mean_mhz``, ``sm_clock_min_mhz``) and every throttle reason seen
  during the cell (``throttle_reasons``: names, ``gpu_idle`` left out).

NVML is optional: when it is missing or fails, the cell still runs and
``"nvml"`` says why (``"unavailable: NVML Shared Library Not Found"``).
"""

from __future__ import annotations

import resource
import sys
import threading
import time
from types import ModuleType, TracebackType
from typing import Any

from batchperf.measure.gpu_health import throttle_names, throttle_reasons

NVML_OK = "ok"
IDLE = 0x1  # the "GPU idle" throttle reason: not a slowdown


def _is_cuda(device: Any) -> bool:
    return getattr(device, "type", str(device).split(":")[0]) == "cuda"


def _nvml_handle(nvml: Any, device: Any) -> Any:
    """The NVML handle of torch's ``device``; by UUID, since CUDA_VISIBLE_DEVICES renumbers devices."""
    if not _is_cuda(device):  # only with an explicitly given NVML module (tests)
        return nvml.nvmlDeviceGetHandleByIndex(0)
    import torch

    index = device.index if getattr(device, "index", None) is not None else torch.cuda.current_device()
    uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
    if uuid is not None:
        try:
            return nvml.nvmlDeviceGetHandleByUUID(f"GPU-{uuid}")
        except nvml.NVMLError:
            pass  # MIG or an older driver: fall back to the index
    return nvml.nvmlDeviceGetHandleByIndex(index)


class _Nvml:
    """One device's NVML readings; every failure becomes a reason string, never an exception."""

    def __init__(self, nvml: Any, handle: Any) -> None:
        self.nvml = nvml
        self.handle = handle
        self.energy_start_mj = self._energy_mj()

    @classmethod
    def open(cls, device: Any, module: ModuleType | None) -> tuple[_Nvml | None, str]:
        try:
            nvml = module
            if nvml is None:
                import pynvml as nvml
        except ImportError as exc:
            return None, f"unavailable: {exc} (pip install nvidia-ml-py)"
        try:
            nvml.nvmlInit()
        except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
            return None, f"unavailable: {exc}"
        try:
            return cls(nvml, _nvml_handle(nvml, device)), NVML_OK
        except Exception as exc:
            _shutdown(nvml)
            return None, f"unavailable: {exc}"

    def _energy_mj(self) -> int | None:
        try:
            return int(self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle))  # mJ since driver load
        except self.nvml.NVMLError:  # pre-Volta: not supported; power is integrated instead
            return None

    def sample(self) -> tuple[float, float, float]:
        """(memory used bytes, GPU utilisation %, power W)."""
        mem = self.nvml.nvmlDeviceGetMemoryInfo(self.handle).used
        util = self.nvml.nvmlDeviceGetUtilizationRates(self.handle).gpu
        power_mw = self.nvml.nvmlDeviceGetPowerUsage(self.handle)
        return float(mem), float(util), power_mw / 1e3

    def soft(self) -> tuple[float | None, int | None]:
        """(SM clock MHz, throttle mask), each None where this device or driver cannot say."""
        clock = mask = None
        try:
            clock = float(self.nvml.nvmlDeviceGetClockInfo(self.handle, self.nvml.NVML_CLOCK_SM))
        except Exception:  # not supported here (or a fake without it): the soft fact is just absent
            pass
        try:
            mask = throttle_reasons(self.nvml, self.handle)
        except Exception:
            pass
        return clock, mask

    def energy_j(self) -> float | None:
        end = self._energy_mj()
        if self.energy_start_mj is None or end is None:
            return None
        return (end - self.energy_start_mj) / 1e3

    def close(self) -> None:
        _shutdown(self.nvml)


def _shutdown(nvml: Any) -> None:
    try:
        nvml.nvmlShutdown()
    except Exception:  # shutting down is best effort; the readings are already taken
        pass


class Sampler:
    """Samples process RSS (and, on CUDA, NVML) every ``interval_s`` in a daemon thread."""

    def __init__(self, device: Any = "cpu", interval_s: float = 0.05, nvml_module: ModuleType | None = None) -> None:
        if not interval_s > 0:
            raise ValueError(f"interval_s must be > 0 s, got {interval_s}")
        self.device = device
        self.interval_s = interval_s
        # None imports pynvml on CUDA; a module given explicitly (tests pass a fake) is used on any device
        self._nvml_module = nvml_module
        self._nvml: _Nvml | None = None
        self.nvml_status = "not used: the device is not CUDA"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._times: list[float] = []
        self._rss: list[float] = []
        self._gpu: list[tuple[float, float, float, float]] = []  # per sample: s, bytes, %, W
        self._sm_clocks: list[float] = []  # MHz, per sample where NVML gives it
        self._throttle = 0  # every throttle reason seen during the cell, OR-ed
        self._t0 = self._t1 = 0.0
        self._energy_j: float | None = None
        self._torch_peaks: dict[str, float] = {}
        self._process_peak_rss = 0.0
        self._thread_cpu_s = 0.0

    def __enter__(self) -> Sampler:
        import psutil

        self._process = psutil.Process()
        if _is_cuda(self.device):
            import torch

            torch.cuda.reset_peak_memory_stats(self.device)
        if _is_cuda(self.device) or self._nvml_module is not None:
            self._nvml, self.nvml_status = _Nvml.open(self.device, self._nvml_module)
        self._t0 = time.perf_counter()
        self._sample()  # one sample at each end, so even a short cell has two
        self._thread = threading.Thread(target=self._loop, name="batchperf-telemetry", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample()
        self._t1 = time.perf_counter()
        self._process_peak_rss = _process_peak_rss_bytes()
        if self._nvml is not None:
            self._energy_j = self._nvml.energy_j()
            self._nvml.close()
        if _is_cuda(self.device):
            import torch

            self._torch_peaks = {
                "torch_peak_allocated_bytes": float(torch.cuda.max_memory_allocated(self.device)),
                "torch_peak_reserved_bytes": float(torch.cuda.max_memory_reserved(self.device)),
            }

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()
        self._thread_cpu_s = time.thread_time()  # what sampling cost, as CPU time of this thread

    def _sample(self) -> None:
        now = time.perf_counter()
        self._times.append(now)
        self._rss.append(float(self._process.memory_info().rss))
        if self._nvml is None:
            return
        try:
            self._gpu.append((now, *self._nvml.sample()))
            clock, mask = self._nvml.soft()
        except Exception as exc:  # the GPU fell off the bus, the driver went away...: stop asking
            self.nvml_status = f"failed during the cell: {exc}"
            self._nvml.close()
            self._nvml = None
            return
        if clock is not None:
            self._sm_clocks.append(clock)
        if mask is not None:
            self._throttle |= mask

    def summary(self, output_tokens: int | None = None) -> dict[str, Any]:
        """Flat telemetry of the cell (bytes, %, W, J); call after the ``with`` block."""
        if self._thread is None or self._thread.is_alive():
            raise RuntimeError("Sampler.summary() needs a finished `with Sampler(...)` block")
        out: dict[str, Any] = {
            "nvml": self.nvml_status,
            "samples": len(self._times),
            "interval_s": self.interval_s,
            "duration_s": self._t1 - self._t0,
            "cell_peak_rss_bytes": max(self._rss),
            "process_peak_rss_bytes": self._process_peak_rss,
            "sampler_cpu_s": self._thread_cpu_s,
        }
        out |= self._torch_peaks
        if self._gpu:
            times, mem, util, power = zip(*self._gpu)
            out |= {
                "gpu_memory_used_peak_bytes": max(mem),
                "gpu_memory_used_mean_bytes": sum(mem) / len(mem),
                "gpu_util_mean_pct": sum(util) / len(util),
                "gpu_util_peak_pct": max(util),
                "power_mean_w": sum(power) / len(power),
                "power_peak_w": max(power),
            }
            energy, source = self._energy_j, "total_energy_counter"
            if energy is None:
                energy, source = _integrate(times, power), "power_samples"
            out |= {"energy_j": energy, "energy_source": source}
            if output_tokens:
                out["joules_per_output_token"] = energy / output_tokens
            if self._sm_clocks:
                out |= {"sm_clock_mean_mhz": sum(self._sm_clocks) / len(self._sm_clocks),
                        "sm_clock_min_mhz": min(self._sm_clocks)}
            out["throttle_reasons"] = throttle_names(self._throttle & ~IDLE)
        return out


def _process_peak_rss_bytes() -> float:
    """The process's lifetime peak RSS; ``ru_maxrss`` is in KiB on Linux, in bytes on macOS."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return float(peak if sys.platform == "darwin" else peak * 1024)


def _integrate(times: tuple[float, ...], watts: tuple[float, ...]) -> float:
    """Joules by the trapezoid rule over (s, W) samples."""
    return sum((t1 - t0) * (w0 + w1) / 2 for t0, t1, w0, w1 in zip(times, times[1:], watts, watts[1:]))
