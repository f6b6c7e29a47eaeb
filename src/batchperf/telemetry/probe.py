"""The machine's own speed in about a second: what a cell can be bound by, measured beside every run.

Three figures, each the median of a few short repeats (the machine's state now, not its best moment):

- ``gemm_gflops``: single-thread fp32 matrix multiply (256 × 256, numpy's BLAS), GFLOP/s: what bounds a
  prefill-heavy cell;
- ``copy_gbps``: memory copy bandwidth (32 MiB arrays, bytes read + written), GB/s: what bounds a decode step that
  streams its weights;
- ``interp_mops``: an interpreter-bound loop, million iterations per second: what bounds a small model's decode,
  where Python dispatch, not arithmetic, sets the pace.

Higher is faster for all three. The probe runs in a child interpreter with one BLAS/OpenMP thread
(``OMP_NUM_THREADS=1`` and its kin set before numpy loads), so neither the suite's torch thread settings nor the
BLAS thread pool touch it, and it touches neither. A figure that cannot be measured (no numpy, a sandbox that
forbids a child process, a timeout) is recorded in ``missing`` with the reason, never as 0.
``python -m batchperf.telemetry.probe`` is the child; ``tools/machine_probe.py`` prints several probes in a row.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

# name -> (what it measures, unit)
FIGURES: dict[str, tuple[str, str]] = {
    "gemm_gflops": ("GEMM", "GFLOP/s"),
    "copy_gbps": ("memory copy", "GB/s"),
    "interp_mops": ("interpreter", "Mops/s"),
}
REPEATS = 7  # per figure; the median is kept
REPEAT_S = 0.02  # each repeat runs about this long: well above the clock's resolution, short beside a cell
GEMM_N = 256
COPY_BYTES = 32 * 2**20  # beyond the last-level cache of the CPUs we run on, so memory, not cache, answers
TIMEOUT_S = 20.0  # the child normally takes ~1 s; a loaded 2-core machine can take several
ONE_THREAD = {name: "1" for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                                     "BLIS_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")}
RESULT_MARK = "BATCHPERF-MACHINE-PROBE "


@dataclass(frozen=True, slots=True)
class MachineProbe:
    """One probe of the machine: its figures (higher is faster), and each figure it could not measure, with why."""

    figures: dict[str, float] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)
    at: str = ""  # when it ran (UTC, ISO 8601)
    seconds: float = 0.0  # how long it took, child start included

    def __post_init__(self) -> None:
        for name, value in self.figures.items():
            if name not in FIGURES:
                raise ValueError(f"probe figures: unknown figure {name!r}; known: {', '.join(FIGURES)}")
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value)
                                                                                    and value > 0):
                raise ValueError(f"probe figures.{name} must be a finite number > 0 (a figure that could not be "
                                 f"measured goes in missing), got {value!r}")
        if both := sorted(self.figures.keys() & self.missing.keys()):
            raise ValueError(f"probe missing names {', '.join(both)}, which figures also holds")
        if not (math.isfinite(self.seconds) and self.seconds >= 0):
            raise ValueError(f"probe seconds must be a finite number >= 0, got {self.seconds!r}")

    def get(self, name: str) -> float | None:
        return self.figures.get(name)

    def to_dict(self) -> dict[str, Any]:
        return {"figures": dict(self.figures), "missing": dict(self.missing), "at": self.at,
                "seconds": round(self.seconds, 3)}

    @classmethod
    def from_dict(cls, data: Any) -> MachineProbe:
        """ValueError naming the field that is not what a probe holds."""
        if not isinstance(data, Mapping):
            raise ValueError(f"a machine probe is a {type(data).__name__}, not an object")
        figures, missing = data.get("figures", {}), data.get("missing", {})
        if not isinstance(figures, Mapping) or not isinstance(missing, Mapping):
            raise ValueError("a machine probe's figures and missing must be objects")
        seconds = data.get("seconds", 0.0)
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
            raise ValueError(f"a machine probe's seconds is {seconds!r}, not a number")
        return cls({str(k): v for k, v in figures.items()}, {str(k): str(v) for k, v in missing.items()},
                   str(data.get("at", "")), float(seconds))

    def describe(self) -> str:
        shown = [f"{FIGURES[k][0]} {v:.3g} {FIGURES[k][1]}" for k, v in self.figures.items()]
        shown += [f"{FIGURES.get(k, (k,))[0]} missing ({why})" for k, why in self.missing.items()]
        return ", ".join(shown)


# --- the measurements (run in the child) ----------------------------------------------------------


def _median_rate(work: Callable[[int], float], unit_per_call: float) -> float:
    """Median over :data:`REPEATS` of ``unit_per_call × calls / seconds``; ``work(calls)`` returns its seconds.
    The number of calls per repeat is chosen so that a repeat lasts about :data:`REPEAT_S`."""
    once = max(work(1), 1e-7)  # also the warm-up: first touches, BLAS's buffers
    calls = max(1, round(REPEAT_S / once))
    return statistics.median(unit_per_call * calls / max(work(calls), 1e-9) for _ in range(REPEATS))


def gemm_gflops() -> float:
    import numpy as np

    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((GEMM_N, GEMM_N), dtype=np.float32) for _ in range(2))
    out = np.empty_like(a)

    def work(calls: int) -> float:
        start = time.perf_counter()
        for _ in range(calls):
            np.matmul(a, b, out=out)
        return time.perf_counter() - start

    return _median_rate(work, 2 * GEMM_N**3 / 1e9)


def copy_gbps() -> float:
    import numpy as np

    src = np.ones(COPY_BYTES // 8)
    dst = np.empty_like(src)

    def work(calls: int) -> float:
        start = time.perf_counter()
        for _ in range(calls):
            np.copyto(dst, src)
        return time.perf_counter() - start

    return _median_rate(work, 2 * COPY_BYTES / 1e9)  # every byte read once and written once


def interp_mops() -> float:
    loop = 100_000

    def work(calls: int) -> float:
        start = time.perf_counter()
        x = 0
        for _ in range(calls):
            for i in range(loop):
                x = (x + i) & 0xFFFF
        return time.perf_counter() - start

    return _median_rate(work, loop / 1e6)


MEASURES: dict[str, Callable[[], float]] = {"gemm_gflops": gemm_gflops, "copy_gbps": copy_gbps,
                                            "interp_mops": interp_mops}


def measure_here() -> dict[str, Any]:
    """Every figure, in this process: ``{"figures": …, "missing": …}``. Each figure on its own: one that fails is
    missing, with the exception, and the others are still measured."""
    figures: dict[str, float] = {}
    missing: dict[str, str] = {}
    for name, fn in MEASURES.items():
        try:
            value = fn()
        except Exception as exc:  # noqa: BLE001 - no numpy, a memory limit: this figure is missing, with why
            missing[name] = f"{type(exc).__name__}: {exc}"
            continue
        if math.isfinite(value) and value > 0:
            figures[name] = value
        else:
            missing[name] = f"measured {value!r}, not a rate"
    return {"figures": figures, "missing": missing}


# --- the parent -----------------------------------------------------------------------------------


def probe(timeout_s: float = TIMEOUT_S) -> MachineProbe:
    """Probe the machine in a child interpreter (one BLAS thread); never raises: a probe that could not run
    is returned with every figure missing and the reason."""
    at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    start = time.perf_counter()
    env = {**os.environ, **ONE_THREAD}
    try:
        done = subprocess.run([sys.executable, "-m", "batchperf.telemetry.probe"], env=env, capture_output=True,
                              text=True, timeout=timeout_s, check=False)
        found = [line for line in done.stdout.splitlines() if line.startswith(RESULT_MARK)]
        if not found:
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            raise RuntimeError(f"the probe's child exited {done.returncode} without a result: {tail[0]}")
        raw = json.loads(found[-1][len(RESULT_MARK):])
        return MachineProbe(raw["figures"], raw["missing"], at, time.perf_counter() - start)
    except subprocess.TimeoutExpired:
        why = f"the probe's child did not finish in {timeout_s:g} s"
    except (OSError, RuntimeError, ValueError, KeyError) as exc:
        why = f"{type(exc).__name__}: {exc}"
    return MachineProbe({}, {name: why for name in FIGURES}, at, time.perf_counter() - start)


@dataclass(frozen=True, slots=True)
class Repeatability:
    """One figure over several probes in a row: how repeatable the probe itself is."""

    name: str
    mean: float
    sd_pct: float  # sample standard deviation as a percentage of the mean
    n: int  # probes that measured it
    missing: int  # probes that could not


def repeatability(probes: list[MachineProbe]) -> list[Repeatability]:
    """Mean and sd% of each figure over ``probes``: the figures a probe's reader can trust to about sd%."""
    out = []
    for name in FIGURES:
        values = [v for p in probes if (v := p.get(name)) is not None]
        mean = statistics.fmean(values) if values else math.nan
        sd = statistics.stdev(values) if len(values) > 1 else math.nan
        out.append(Repeatability(name, mean, 100 * sd / mean if values else math.nan, len(values),
                                 len(probes) - len(values)))
    return out


if __name__ == "__main__":  # the child: one line on stdout
    print(RESULT_MARK + json.dumps(measure_here()), flush=True)
