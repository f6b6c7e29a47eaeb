"""``batchperf gpu-health``: the GPUs' state before a nightly run, as JSON beside the results.

Other processes on a GPU, clocks below their maximum (throttling), persistence
mode off (the first CUDA call pays for driver start-up) all make a night's
numbers noisy without any code change. The nightly job records them from
``nvidia-smi`` next to the results and warns; they are soft facts, never a
reason to skip. Without a GPU the file says so, so the CPU path produces the
same artifacts.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

GPU_FIELDS = ("index", "uuid", "name", "persistence_mode", "clocks.sm", "clocks.max.sm", "clocks.mem",
              "clocks.max.mem", "power.draw", "power.limit", "temperature.gpu", "utilization.gpu", "memory.used",
              "memory.total", "clocks_throttle_reasons.active")
APP_FIELDS = ("gpu_uuid", "pid", "process_name", "used_memory")


def _rows(text: str, names: tuple[str, ...]) -> list[dict[str, str]]:
    rows = [r for r in csv.reader(io.StringIO(text), skipinitialspace=True) if r]
    return [dict(zip(names, (v.strip() for v in row))) for row in rows]


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:  # "[N/A]", "[Not Supported]"
        return None


def parse(gpu_csv: str, apps_csv: str) -> dict[str, Any]:
    """Health from ``nvidia-smi --query-gpu`` and ``--query-compute-apps`` CSV (noheader, nounits)."""
    apps = _rows(apps_csv, APP_FIELDS)
    gpus, warnings = [], []
    for row in _rows(gpu_csv, GPU_FIELDS):
        others = [{"pid": int(a["pid"]), "name": a["process_name"], "used_memory_mib": _number(a["used_memory"])}
                  for a in apps if a["gpu_uuid"] == row["uuid"]]
        gpu = {"index": int(row["index"]), "name": row["name"], "uuid": row["uuid"],
               "persistence_mode": row["persistence_mode"], "throttle_reasons": row["clocks_throttle_reasons.active"],
               **{k.replace(".", "_"): _number(row[k]) for k in GPU_FIELDS[4:14]}, "other_processes": others}
        gpus.append(gpu)
        label = f"GPU {gpu['index']} ({gpu['name']})"
        if others:
            warnings.append(f"{label}: {len(others)} other process(es) on it: "
                            + ", ".join(f"{o['name']} (pid {o['pid']})" for o in others))
        if gpu["persistence_mode"].lower() != "enabled":
            warnings.append(f"{label}: persistence mode is {gpu['persistence_mode']}; `sudo nvidia-smi -pm 1` "
                            f"keeps the driver loaded between runs")
        if gpu["throttle_reasons"] not in ("0x0000000000000000", "0x0000000000000001", ""):
            # 0x1 is "GPU idle", expected before a run; anything else is power, thermal or an applied clock cap
            warnings.append(f"{label}: clocks throttled (reasons {gpu['throttle_reasons']})")
    return {"gpu": bool(gpus), "gpus": gpus, "warnings": warnings}


def collect(nvidia_smi: str | None = None) -> dict[str, Any]:
    """This machine's GPU health; ``{"gpu": false, "reason": ...}`` without nvidia-smi or a driver."""
    exe = nvidia_smi or shutil.which("nvidia-smi")
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    if exe is None:
        return {"gpu": False, "reason": "no GPU: nvidia-smi not found on PATH", "time": stamp, "gpus": [],
                "warnings": []}
    try:
        gpu_csv, apps_csv = (
            subprocess.run([exe, f"--query-{what}={','.join(fields)}", "--format=csv,noheader,nounits"],
                           capture_output=True, text=True, check=True, timeout=60).stdout
            for what, fields in (("gpu", GPU_FIELDS), ("compute-apps", APP_FIELDS)))
    except (OSError, subprocess.SubprocessError) as exc:
        return {"gpu": False, "reason": f"no GPU: nvidia-smi failed ({exc})", "time": stamp, "gpus": [],
                "warnings": []}
    return {**parse(gpu_csv, apps_csv), "time": stamp}


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, required=True, help="JSON file to write")
    parser.add_argument("--nvidia-smi", default=None, help="path of nvidia-smi (default: from PATH)")


def main(args: argparse.Namespace) -> int:
    health = collect(args.nvidia_smi)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(health, indent=2) + "\n")
    what = health.get("reason") or f"{len(health['gpus'])} GPU(s)"
    print(f"batchperf gpu-health: {what} -> {args.out}")
    for line in health["warnings"]:
        print(f"warning: {line}")
    return 0
