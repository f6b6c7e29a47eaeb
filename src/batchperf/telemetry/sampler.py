"""Telemetry of one cell: a background thread that samples the GPU (NVML) and the process.

``with Sampler(device) as s: run the cell`` then ``s.summary(output_tokens)``
gives a flat dict for the cell's results:

- always: ``cpu_s`` and, given the output tokens, ``cpu_seconds_per_output_token``: the CPU time of this
  process's tree in the round, and of the processes outside it that do the cell's work, each counted once
  (:meth:`Sampler.counting_also`: a server kept across processes, ``ab --keep-servers``); ``samples``,
  ``interval_s``, ``duration_s``, ``cell_peak_rss_bytes``,
  the largest process RSS sampled during the cell, ``process_peak_rss_bytes``,
  the process's lifetime peak (``ru_maxrss``: it includes every cell and load
  before this one, so it cannot tell one cell from another), and
  ``sampler_cpu_s``, the CPU time the sampling thread itself used; and where Linux keeps schedstats,
  ``cpu_wait_share``, the share of the tree's runnable time its threads waited for a CPU
  (:mod:`batchperf.telemetry.runqueue`: the machine busy with other work);
- on CUDA: ``torch_peak_allocated_bytes`` / ``torch_peak_reserved_bytes``
  (torch's peaks, reset when the cell starts), and through NVML (the
  ``pynvml`` module of nvidia-ml-py) the device's memory used, utilisation,
  power, and energy from the total-energy counter (``joules_per_output_token``);
  and, as soft facts that explain a slow cell but are never gated, the SM clock
  (``sm_clock_start_mhz``, ``sm_clock_min_mhz``, ``sm_clock_mean_mhz``, and
  ``sm_clock_drop``, its largest fall from an earlier busy peak), the GPU
  temperature (``temperature_mean_c``, ``temperature_peak_c``) and every
  throttle reason seen during the cell (``throttle_reasons``: names, ``gpu_idle``
  left out). A clock drop beyond 7% or a thermal or hardware-slowdown throttle
  voids the cell (:mod:`batchperf.telemetry.gpu_clocks`).

NVML is optional: when it is missing or fails, the cell still runs and
``"nvml"`` says why (``"unavailable: NVML Shared Library Not Found"``).
"""

from __future__ import annotations

import os
import resource
import statistics
import sys
import threading
import time
from collections.abc import Sequence
from types import ModuleType, TracebackType
from typing import Any

from batchperf.telemetry.gpu_clocks import clock_drop
from batchperf.telemetry.nvml import Nvml, Unavailable, open_nvml, slowdowns
from batchperf.telemetry.runqueue import Counts, thread_counts, wait_share

NVML_OK = "ok"
# figures per output token: a cell stores their median over its measured rounds, as it does its metrics
PER_TOKEN = ("cpu_seconds_per_output_token", "joules_per_output_token")
MEDIAN_OVER_ROUNDS = (*PER_TOKEN, "cpu_wait_share")  # the figures a cell keeps as the median of its rounds


def _is_cuda(device: Any) -> bool:
    return getattr(device, "type", str(device).split(":")[0]) == "cuda"


def _device_ids(device: Any) -> tuple[int, str | None]:
    """(index, NVML UUID) of torch's ``device``: NVML finds it by UUID, since CUDA_VISIBLE_DEVICES renumbers devices."""
    if not _is_cuda(device):  # only with an explicitly given NVML module (tests)
        return 0, None
    import torch

    index = device.index if getattr(device, "index", None) is not None else torch.cuda.current_device()
    uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
    return index, None if uuid is None else f"GPU-{uuid}"


class _Device:
    """One device's NVML readings during a cell; every failure to start becomes a reason string, never an exception."""

    def __init__(self, nvml: Nvml, handle: Any) -> None:
        self.nvml = nvml
        self.handle = handle
        self.energy_start_mj = self._energy_mj()

    @classmethod
    def open(cls, device: Any, module: ModuleType | None) -> tuple[_Device | None, str]:
        nvml = open_nvml(module)
        if isinstance(nvml, Unavailable):
            return None, f"unavailable: {nvml.reason}"
        try:
            return cls(nvml, nvml.handle(*_device_ids(device))), NVML_OK
        except Exception as exc:
            nvml.close()
            return None, f"unavailable: {exc}"

    def _energy_mj(self) -> int | None:
        # mJ since driver load; None before Volta (not supported), and then power is integrated instead
        energy = self.nvml.read(self.nvml.lib.nvmlDeviceGetTotalEnergyConsumption, self.handle)
        return None if energy is None else int(energy)

    def sample(self) -> tuple[float, float, float]:
        """(memory used bytes, GPU utilisation %, power W); an NVML error here means the device is gone: it raises."""
        lib = self.nvml.lib
        mem = lib.nvmlDeviceGetMemoryInfo(self.handle).used
        util = lib.nvmlDeviceGetUtilizationRates(self.handle).gpu
        power_mw = lib.nvmlDeviceGetPowerUsage(self.handle)
        return float(mem), float(util), power_mw / 1e3

    def soft(self) -> tuple[float | None, int | None, float | None]:
        """(SM clock MHz, throttle mask, temperature °C), each None where this device or driver cannot say."""
        lib = self.nvml.lib
        clock = self.nvml.read(lib.nvmlDeviceGetClockInfo, self.handle, lib.NVML_CLOCK_SM)
        temperature = self.nvml.read(lib.nvmlDeviceGetTemperature, self.handle, lib.NVML_TEMPERATURE_GPU)
        return (None if clock is None else float(clock), self.nvml.throttle_mask(self.handle),
                None if temperature is None else float(temperature))

    def energy_j(self) -> float | None:
        end = self._energy_mj()
        if self.energy_start_mj is None or end is None:
            return None
        return (end - self.energy_start_mj) / 1e3

    def close(self) -> None:
        self.nvml.close()


class Sampler:
    """Samples process RSS (and, on CUDA, NVML) every ``interval_s`` in a daemon thread."""

    def __init__(self, device: Any = "cpu", interval_s: float = 0.05, nvml_module: ModuleType | None = None) -> None:
        if not interval_s > 0:
            raise ValueError(f"interval_s must be > 0 s, got {interval_s}")
        self.device = device
        self.interval_s = interval_s
        # None imports pynvml on CUDA; a module given explicitly (tests pass a fake) is used on any device
        self._nvml_module = nvml_module
        self._nvml: _Device | None = None
        self.nvml_status = "not used: the device is not CUDA"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._times: list[float] = []
        self._rss: list[float] = []
        self._gpu: list[tuple[float, float, float, float]] = []  # per sample: s, bytes, %, W
        self._clock_samples: list[tuple[float | None, int | None]] = []  # per sample: SM clock MHz, throttle mask
        self._temperatures: list[float] = []  # °C, per sample where NVML gives it
        self._throttle = 0  # every throttle reason seen during the cell, OR-ed
        self._t0 = self._t1 = 0.0
        self._energy_j: float | None = None
        self._torch_peaks: dict[str, float] = {}
        self._process_peak_rss = 0.0
        self._thread_cpu_s = 0.0
        self._tree_cpu_s = 0.0  # CPU seconds of this process and its descendants during the cell
        self._outside: tuple[int, ...] = ()  # pids of processes outside this one's tree doing the cell's work
        self._outside_roots: list[Any] = []  # their psutil.Process handles, taken when the cell starts
        self._waits: Counts | None = None  # run and wait ns of the tree's threads when the cell started
        self._sampler_tid = 0
        self._wait_share: float | None = None

    def counting_also(self, pids: Sequence[int]) -> Sampler:
        """Count the CPU time of ``pids`` and their descendants too: processes outside this one's tree that do the
        cell's work (a server kept across processes, which a process started earlier: ``outside_processes`` of
        the vllm-server backend). Each process is counted once, also one that is in this process's tree as well.
        Returns the sampler: ``with sampler.counting_also(pids):``."""
        self._outside = tuple(pids)
        return self

    def __enter__(self) -> Sampler:
        import psutil

        self._process = psutil.Process()
        self._outside_roots = [p for pid in self._outside if (p := _process_or_none(pid)) is not None]
        if _is_cuda(self.device):
            import torch

            torch.cuda.reset_peak_memory_stats(self.device)
        if _is_cuda(self.device) or self._nvml_module is not None:
            self._nvml, self.nvml_status = _Device.open(self.device, self._nvml_module)
        tree = _tree(self._process, self._outside_roots)
        self._tree_cpu_s = -_tree_cpu_s(tree)
        self._waits = thread_counts(member.pid for member, _ in tree)
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
        # the cell's work, not the sampling
        tree = _tree(self._process, self._outside_roots)
        self._tree_cpu_s += _tree_cpu_s(tree) - self._thread_cpu_s
        self._wait_share = wait_share(self._waits, thread_counts(member.pid for member, _ in tree),
                                      leave_out=[(os.getpid(), self._sampler_tid)])
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
        self._sampler_tid = threading.get_native_id()
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
            clock, mask, temperature = self._nvml.soft()
        except Exception as exc:  # the GPU fell off the bus, the driver went away...: stop asking
            self.nvml_status = f"failed during the cell: {exc}"
            self._nvml.close()
            self._nvml = None
            return
        self._clock_samples.append((clock, mask))
        if temperature is not None:
            self._temperatures.append(temperature)
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
            "cpu_s": self._tree_cpu_s,
        }
        if output_tokens:
            out["cpu_seconds_per_output_token"] = self._tree_cpu_s / output_tokens
        if self._wait_share is not None:
            out["cpu_wait_share"] = self._wait_share
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
            if clocks := [c for c, _ in self._clock_samples if c is not None]:
                out |= {"sm_clock_start_mhz": clocks[0], "sm_clock_min_mhz": min(clocks),
                        "sm_clock_mean_mhz": sum(clocks) / len(clocks)}
            if (drop := clock_drop(self._clock_samples)) is not None:
                out["sm_clock_drop"] = drop
            if self._temperatures:
                out |= {"temperature_mean_c": sum(self._temperatures) / len(self._temperatures),
                        "temperature_peak_c": max(self._temperatures)}
            out["throttle_reasons"] = slowdowns(self._throttle)
        return out


def summarise_telemetry(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """A cell's telemetry from its measured rounds' summaries: the last round's, except the figures per output
    token and the CPU wait share (``MEDIAN_OVER_ROUNDS``), which are the median over the rounds that have them, as
    the cell's metrics are, and
    the GPU's clocks, throttles and temperature, which cover every round (:func:`_whole_cell_clocks`), so that a
    round the card slowed voids the cell whichever round it was.

    One round's CPU time per token moves twice as much between processes as the median of five (sd of a
    pair's ln(B/A) 0.097 against 0.048 on the compute-bound CPU cell, ``tools/ab_detector.py``), and it
    stands beside throughput, itself a median, to be compared with it.
    """
    if not rounds:
        return {}
    out = dict(rounds[-1])
    for key in MEDIAN_OVER_ROUNDS:
        if values := [r[key] for r in rounds if r.get(key) is not None]:
            out[key] = statistics.median(values)
    return out | _whole_cell_clocks(rounds)


def _whole_cell_clocks(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The clock and throttle figures of a cell over all its rounds: every throttle reason seen in any round, the
    first round's starting SM clock and the lowest of any, the hottest reading, and the largest fall of the SM
    clock, within a round or from an earlier round's start to a later round's lowest (a card that cools down
    between rounds and runs each a little slower). Empty where no round read the GPU."""
    out: dict[str, Any] = {}
    if seen := [r["throttle_reasons"] for r in rounds if isinstance(r.get("throttle_reasons"), list)]:
        out["throttle_reasons"] = list(dict.fromkeys(reason for reasons in seen for reason in reasons))
    clocked = [r for r in rounds if r.get("sm_clock_start_mhz") is not None and r.get("sm_clock_min_mhz") is not None]
    if clocked:
        out["sm_clock_start_mhz"] = clocked[0]["sm_clock_start_mhz"]
        out["sm_clock_min_mhz"] = min(r["sm_clock_min_mhz"] for r in clocked)
        ends = [(r[k], None) for r in clocked for k in ("sm_clock_start_mhz", "sm_clock_min_mhz")]
        drops = [d for d in (clock_drop(ends), *(r.get("sm_clock_drop") for r in rounds)) if d is not None]
        if drops:
            out["sm_clock_drop"] = max(drops)
    if peaks := [r["temperature_peak_c"] for r in rounds if r.get("temperature_peak_c") is not None]:
        out["temperature_peak_c"] = max(peaks)
    return out


def _process_or_none(pid: int) -> Any:
    import psutil

    try:
        return psutil.Process(pid)
    except psutil.Error:  # gone already: nothing of it can be counted
        return None


def _tree(process: Any, outside: Sequence[Any] = ()) -> list[tuple[Any, bool]]:
    """``process`` and each ``outside`` process (a kept server's guard), then every live descendant of theirs (a vLLM
    engine core or server the cell started), each once, by pid (a kept server is in the tree of the process that
    started it too): ``(process, is_root)``, the roots first, as the cell's CPU time and wait share read them."""
    import psutil

    members: dict[int, tuple[Any, bool]] = {root.pid: (root, True) for root in (process, *outside)}
    for root in (process, *outside):
        try:
            children = root.children(recursive=True)
        except psutil.Error:
            continue
        for child in children:
            members.setdefault(child.pid, (child, False))
    return list(members.values())


def _tree_cpu_s(tree: list[tuple[Any, bool]]) -> float:
    """User + system CPU seconds of the :func:`_tree`'s members, each root's with its reaped children's (a child's
    time moves there when it exits; one that exits unreaped by its parent during the cell is lost)."""
    import psutil

    total = 0.0
    for member, root in tree:
        try:
            t = member.cpu_times()
        except psutil.Error:  # it ended during the cell, or between the listing and the read
            continue
        total += t.user + t.system + (t.children_user + t.children_system if root else 0.0)
    return total


def _process_peak_rss_bytes() -> float:
    """The process's lifetime peak RSS; ``ru_maxrss`` is in KiB on Linux, in bytes on macOS."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return float(peak if sys.platform == "darwin" else peak * 1024)


def _integrate(times: tuple[float, ...], watts: tuple[float, ...]) -> float:
    """Joules by the trapezoid rule over (s, W) samples."""
    return sum((t1 - t0) * (w0 + w1) / 2 for t0, t1, w0, w1 in zip(times, times[1:], watts, watts[1:]))
