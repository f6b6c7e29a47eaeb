"""Hand-made cell records and results files for the gate, store and refresh tests (no model runs)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from batchperf.measure.catalogue import GATED
from batchperf.regress.fingerprint import GPU, Fingerprint, HardwareIdentity
from batchperf.results.record import SCHEMA_VERSION, CellRecord

# The CPU tier's throughput tolerance as the gate's table prints it (e.g. "-15.0%")
CPU_TPUT_TOL = f"-{GATED[0].floor('cpu'):.1%}"

CPU_FP = Fingerprint(HardwareIdentity("x86_64", "Test CPU 9000", 2), {"python": "3.11.7", "torch": "2.13.0"},
                     {"hostname": "box"})
GPU_FP = Fingerprint(HardwareIdentity("x86_64", "Test CPU 9000", 16, (GPU("NVIDIA H200", 143771),)),
                     {"python": "3.11.7", "torch": "2.13.0", "driver": "570.1"}, {"hostname": "gpubox"})


def cell_info(cell_id: str = "cpu-tiny-qwen2-hf-static-bs4-p64-c8", throughput: float = 100.0, p99: float = 50.0,
              spread: float = 0.02, kv: float = 2048.0, tier: str = "cpu") -> CellRecord:
    """One cell's record as the plugin stores it: median metrics, 3 rounds with ±spread, KV, telemetry."""
    def metrics(scale: float) -> dict[str, float]:
        return {
            "completed": 16, "failed": 0, "duration": 1.0,
            "output_throughput": throughput * scale, "request_throughput": throughput / 24 * scale,
            "p99_ttft_ms": p99 / 5 / scale, "p99_tpot_ms": p99 / 20 / scale, "p99_itl_ms": p99 / 18 / scale,
            "p99_e2el_ms": p99 / scale, "mean_ttft_ms": p99 / 8 / scale, "n_e2el": 16,
            "p50_ttft_ms": p99 / 10 / scale, "p50_tpot_ms": p99 / 30 / scale, "p50_e2el_ms": p99 / 2 / scale,
        }
    return CellRecord.from_dict({
        "batchperf_schema": SCHEMA_VERSION,
        "cell": {"id": cell_id, "tier": tier, "model": "tiny-qwen2", "backend": "hf-static", "batch_size": 4,
                 "prompt_len": "64", "concurrency": 8, "num_prompts": 16, "num_warmup": 1, "output_lens": [16, 32],
                 "arrival": {"kind": "closed", "rate": None, "burstiness": 1.0}, "seed": 0, "rounds": 3,
                 "warmup_rounds": 1, "device": "cpu", "dtype": "float32"},
        "model": {"source": "builtin:tiny-qwen2", "path": "/cache/tiny", "config_hash": "abcdef0123456789"},
        "metrics": metrics(1.0),
        "rounds": [metrics(1 - spread), metrics(1.0), metrics(1 + spread)],
        "kv": {"bytes_per_token_analytic": 2048, "bytes_per_token_measured": kv,
               "kv_bytes_per_request_mean": kv * 100},
        "telemetry": {"nvml": "not used: the device is not CUDA", "samples": 20, "cell_peak_rss_bytes": 5e8,
                      "process_peak_rss_bytes": 6e8},
        "token_count_errors": [],
        "traces": [{"requests": []}],
    })


def gpu_check_cell(backend: str, batch: int, throughput: float, p99: float = 50.0) -> CellRecord:
    """A cell of ci/gpu_check.sh's slice (GPU tier, Qwen2.5-0.5B on dummy weights, prompt 128, 64 in flight)."""
    rec = cell_info(f"gpu-qwen2.5-0.5b-{backend}-bs{batch}-p128-c64", throughput=throughput, p99=p99, tier="gpu")
    rec.cell.update(backend=backend, batch_size=batch, model="qwen2.5-0.5b", prompt_len="128", concurrency=64)
    rec.model["weights"] = "dummy"
    rec.efficiency.update(device="NVIDIA H200", decode_mbu=0.0123, prefill_mfu=0.05,
                          decode_bandwidth_bytes_per_s=59e9)
    return rec


def copied(record: CellRecord) -> CellRecord:
    return CellRecord.from_dict(copy.deepcopy(record.to_dict()))


def scaled(record: CellRecord, slowdown: float) -> CellRecord:
    """``record`` as if every step took ``slowdown`` times as long (times × s, throughputs / s)."""
    out = copied(record)
    for block in [out.metrics, *out.rounds]:
        for key in list(block):
            if key.endswith("_ms"):
                block[key] *= slowdown
            elif key.endswith("throughput"):
                block[key] /= slowdown
    return out


CLIENT_LAG_REASON = "the client's event loop lagged: p99 31.0 ms > 5 ms (max 60.0 ms)"


def client_bound(record: CellRecord, saturated: bool = True) -> CellRecord:
    """``record`` as the client-lag check marks a cell whose client fell behind (batchperf.measure.client_lag)."""
    out = copied(record)
    out.client = {"loop_lag_p99_ms": 31.0, "server_occupancy": 0.97 if saturated else 0.4,
                  "client_bound": True, "server_saturated": saturated,
                  "reasons": [f"round 1 of 3: {CLIENT_LAG_REASON}"], "absent": {}}
    return CellRecord.from_dict(out.to_dict())  # as a reader gets it


def bench(record: CellRecord, name: str | None = None) -> dict[str, Any]:
    name = name or f"perf_tests/test_cells.py::test_cell[{record.id}]"
    return {"group": None, "name": name.split("::")[-1], "fullname": name, "params": None, "param": None,
            "extra_info": record.to_dict(), "options": {"min_rounds": 3},
            "stats": {"min": 1.0, "max": 1.2, "mean": 1.1, "stddev": 0.1, "rounds": 3, "median": 1.1, "iqr": 0.1,
                      "q1": 1.0, "q3": 1.2, "iqr_outliers": 0, "stddev_outliers": 0, "outliers": "0;0",
                      "ld15iqr": 1.0, "hd15iqr": 1.2, "ops": 0.9, "total": 3.3, "data": [1.0, 1.1, 1.2],
                      "iterations": 1}}


def results_file(path: Path, infos: list[CellRecord], fp: Fingerprint | None = CPU_FP,
                 dirty: bool = False) -> Path:
    machine_info: dict[str, Any] = {"node": "box", "machine": "x86_64", "python_version": "3.11.7"}
    if fp is not None:
        machine_info["batchperf"] = fp.to_dict()
    data = {"machine_info": machine_info,
            "commit_info": {"id": "c0ffee", "dirty": dirty, "branch": "main", "time": "2025-01-01T00:00:00"},
            "benchmarks": [bench(i) for i in infos], "datetime": "2025-01-01T00:00:00", "version": "5.3.1"}
    path.write_text(json.dumps(data))
    return path


# a cell test for the gate plugin alone, run by pytester (tests/suite/test_gate_plugin*.py)
CELL_TEST = """
import os, time
from batchperf.suite.gate_plugin import gate_cell, gate_outcome
from gate_samples import cell_info, scaled

def test_cell(benchmark, request):
    sleep = float(os.environ.get("SLEEP", "0"))
    benchmark.pedantic(lambda: time.sleep(sleep), rounds=3, iterations=1)
    record = scaled(cell_info(), float(os.environ.get("SLOW", "1")))
    again = float(os.environ.get("AGAIN", os.environ.get("SLOW", "1")))
    verdict = gate_cell(request, record, remeasure=lambda: scaled(cell_info(), again))
    benchmark.extra_info.update(record.to_dict())
    gate_outcome(request, verdict)
"""
PLUGINS = ("-p", "no:batchperf", "-p", "batchperf.suite.gate_plugin", "-p", "no:cacheprovider")


def run(suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, *args: str, **env: str) -> pytest.RunResult:
    for key in ("SLOW", "AGAIN", "SLEEP"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return suite.runpytest(*PLUGINS, *args)
