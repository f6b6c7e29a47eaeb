"""GPU health from nvidia-smi's CSV; a clear "no GPU" record without it."""

import argparse
import json
import stat
from pathlib import Path

from batchperf.measure.gpu_health import collect, main, parse

GPUS = ("0, GPU-aaa, NVIDIA H100 80GB HBM3, Enabled, 1980, 1980, 2619, 2619, 71.2, 700.00, 34, 0, 1, 81559, "
        "0x0000000000000001\n"
        "1, GPU-bbb, NVIDIA H100 80GB HBM3, Disabled, 1410, 1980, 2619, 2619, 301.5, 700.00, 81, 97, 40210, 81559, "
        "0x0000000000000020\n")
APPS = "GPU-bbb, 4242, python3, 40200\n"


def test_parse_flags_other_processes_persistence_and_throttling() -> None:
    health = parse(GPUS, APPS)
    assert health["gpu"] is True and [g["index"] for g in health["gpus"]] == [0, 1]
    idle, busy = health["gpus"]
    assert idle["other_processes"] == [] and idle["clocks_sm"] == 1980.0 and idle["power_limit"] == 700.0
    assert busy["other_processes"] == [{"pid": 4242, "name": "python3", "used_memory_mib": 40200.0}]
    assert health["warnings"] == [
        "GPU 1 (NVIDIA H100 80GB HBM3): 1 other process(es) on it: python3 (pid 4242)",
        "GPU 1 (NVIDIA H100 80GB HBM3): persistence mode is Disabled; `sudo nvidia-smi -pm 1` keeps the driver "
        "loaded between runs",
        "GPU 1 (NVIDIA H100 80GB HBM3): clocks throttled (reasons 0x0000000000000020)",
    ]


def test_without_nvidia_smi_the_record_says_no_gpu(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    out = tmp_path / "health.json"
    assert main(argparse.Namespace(out=out, nvidia_smi=None)) == 0
    health = json.loads(out.read_text())
    assert health["gpu"] is False and health["reason"] == "no GPU: nvidia-smi not found on PATH"


def test_collect_runs_nvidia_smi(tmp_path: Path) -> None:
    fake = tmp_path / "nvidia-smi"
    fake.write_text(f"#!/bin/sh\ncase \"$1\" in --query-gpu=*) printf '%s' '{GPUS}';; *) printf '%s' '{APPS}';; esac\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    health = collect(str(fake))
    assert len(health["gpus"]) == 2 and len(health["warnings"]) == 3


def test_failing_nvidia_smi_is_no_gpu(tmp_path: Path) -> None:
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2\nexit 9\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    health = collect(str(fake))
    assert health["gpu"] is False and health["reason"].startswith("no GPU: nvidia-smi failed")
