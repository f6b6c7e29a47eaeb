"""The one NVML reader, against the tests' fake pynvml: start-up or its reason, UUID lookup, guarded reads, throttling."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from fake_nvml import FakeNvml, NVMLError
from paths import REPO

from batchperf.telemetry.nvml import Nvml, Unavailable, open_nvml, slowdowns, text, throttle_names


def two_gpus() -> FakeNvml:
    return FakeNvml([{"uuid": "GPU-aaa", "clock_sm": 1980, "throttle": 0x1},
                     {"uuid": "GPU-bbb", "throttle": 0x40 | 0x1}])  # the second has no SM clock reading


def test_open_starts_nvml_and_closing_shuts_it_down_once() -> None:
    fake = two_gpus()
    nvml = open_nvml(fake)
    assert isinstance(nvml, Nvml) and nvml.lib is fake
    with nvml:
        assert fake.shutdowns == 0
    nvml.close()  # closing again (a failure path after a `with`) does not shut NVML down twice
    assert fake.shutdowns == 1


def test_pynvml_is_imported_only_when_opened(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = two_gpus()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    nvml = open_nvml()
    assert isinstance(nvml, Nvml) and nvml.lib is fake


def test_without_nvidia_ml_py_the_answer_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # `import pynvml` now raises ImportError
    nvml = open_nvml()
    assert isinstance(nvml, Unavailable) and not nvml.installed
    assert nvml.reason == f"{nvml.error} (pip install nvidia-ml-py)" and "pynvml" in nvml.error


def test_nvml_that_does_not_start_is_an_answer_not_an_exception() -> None:
    nvml = open_nvml(FakeNvml(init_error="Driver Not Loaded"))
    assert nvml == Unavailable("Driver Not Loaded") and nvml.reason == "Driver Not Loaded"


def test_nothing_loads_pynvml_at_import_time(tmp_path: Path) -> None:
    (tmp_path / "pynvml.py").write_text("")  # found first, whether nvidia-ml-py is installed or not
    users = "batchperf.telemetry.nvml, batchperf.telemetry.sampler, batchperf.telemetry.gpu_health, " \
            "batchperf.regress.fingerprint"
    code = f"import sys, {users}; sys.exit('pynvml' in sys.modules)"
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO / 'src'}"}
    assert subprocess.run([sys.executable, "-c", code], env=env, timeout=60).returncode == 0


def test_a_guarded_read_is_none_on_an_nvml_error_only() -> None:
    fake = two_gpus()
    with open_nvml(fake) as nvml:
        assert nvml.read(fake.nvmlDeviceGetClockInfo, 0, fake.NVML_CLOCK_SM) == 1980
        assert nvml.read(fake.nvmlDeviceGetClockInfo, 1, fake.NVML_CLOCK_SM) is None  # "Not Supported"
        with pytest.raises(ZeroDivisionError):  # a bug is not an absent reading
            nvml.read(lambda: 1 / 0)


def test_a_device_is_found_by_uuid_since_cuda_visible_devices_renumbers() -> None:
    fake = two_gpus()
    with open_nvml(fake) as nvml:
        # CUDA_VISIBLE_DEVICES=1: torch's device 0 is NVML's device 1
        assert nvml.handle(0, "GPU-bbb") == 1
        assert nvml.handle(1, "MIG-ccc") == 1  # a UUID NVML does not know (MIG, an older driver): by index
        assert nvml.handle(0) == 0
        with pytest.raises(NVMLError):  # no such device at all: the caller says why
            nvml.handle(2)


def test_throttle_mask_reads_either_name_of_the_call() -> None:
    fake = two_gpus()
    with open_nvml(fake) as nvml:
        assert nvml.throttle_mask(1) == 0x41  # the older name (the fake has only that one)
        fake.nvmlDeviceGetCurrentClocksEventReasons = lambda handle: 0x4  # newer nvidia-ml-py: preferred
        assert nvml.throttle_mask(1) == 0x4
    with open_nvml(FakeNvml([{}])) as nvml:
        assert nvml.throttle_mask(0) is None  # not supported on this device


def test_throttle_bits_decode_to_names() -> None:
    assert throttle_names(0x0) == []
    assert throttle_names(0x1 | 0x40 | 0x400) == ["gpu_idle", "hw_thermal_slowdown", "0x400"]  # unknown bits as hex
    assert slowdowns(0x1) == [] and slowdowns(0x1 | 0x4) == ["sw_power_cap"]  # idle is not a slowdown


def test_text_decodes_bytes_from_older_nvidia_ml_py() -> None:
    assert text(b"NVIDIA H100 80GB HBM3") == text("NVIDIA H100 80GB HBM3") == "NVIDIA H100 80GB HBM3"
