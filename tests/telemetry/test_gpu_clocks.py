"""The rule that voids a GPU cell: a > 7% SM clock drop or a thermal / hardware-slowdown throttle; the software
power cap is recorded, never voiding. Readings come from the one fake NVML through the telemetry sampler."""

from __future__ import annotations

import time
from typing import Any

import pytest
from fake_nvml import FakeNvml

from batchperf.telemetry.gpu_clocks import CLOCK_DROP_VOID, clock_drop, recorded_reasons, void_reason
from batchperf.telemetry.sampler import Sampler

BUSY, IDLE, POWER_CAP, HW_SLOWDOWN, HW_THERMAL, SW_THERMAL = 0x0, 0x1, 0x4, 0x8, 0x40, 0x20


def cell_telemetry(clocks: list[int], throttle: list[int], **readings: Any) -> dict[str, Any]:
    """A cell's telemetry as the sampler writes it, on a fake GPU whose SM clock and throttle mask follow the
    series given (one value per sample, the last repeating)."""
    fake = FakeNvml([{"memory_used": 1000, "util": 90, "power_mw": 300_000, "clock_sm": clocks,
                      "throttle": throttle, "temperature": [60, 70, 65]} | readings])
    with Sampler("cpu", interval_s=0.005, nvml_module=fake) as s:
        deadline = time.monotonic() + 10
        while fake.times_read("clock_sm") < len(clocks) + 1 and time.monotonic() < deadline:  # every value read
            time.sleep(0.005)
    return s.summary(output_tokens=10)


def test_steady_clocks_leave_the_cell_judged() -> None:
    out = cell_telemetry([1980, 1980, 1965], [BUSY])
    assert out["sm_clock_start_mhz"] == 1980 and out["sm_clock_min_mhz"] == 1965
    assert out["sm_clock_drop"] == pytest.approx(15 / 1980)
    assert out["temperature_peak_c"] == 70 and 60 < out["temperature_mean_c"] < 70
    assert out["power_mean_w"] == 300 and out["throttle_reasons"] == []
    assert void_reason(out) is None


def test_a_clock_drop_beyond_seven_percent_voids_the_cell() -> None:
    out = cell_telemetry([1980, 1980, 1800, 1800], [BUSY])  # -9.1% mid-cell, no throttle reason given
    assert out["sm_clock_drop"] == pytest.approx(180 / 1980) and out["sm_clock_drop"] > CLOCK_DROP_VOID
    why = void_reason(out)
    assert why is not None and "the SM clock fell 9.1% during the cell" in why and "lowest 1800 MHz" in why


def test_a_drop_of_exactly_seven_percent_or_less_does_not_void() -> None:
    assert void_reason({"sm_clock_drop": 0.07, "sm_clock_start_mhz": 2000, "sm_clock_min_mhz": 1860}) is None


@pytest.mark.parametrize(("mask", "name"), [(HW_THERMAL, "hw_thermal_slowdown"), (SW_THERMAL, "sw_thermal_slowdown"),
                                            (HW_SLOWDOWN, "hw_slowdown")])
def test_a_thermal_or_hardware_slowdown_throttle_voids_the_cell(mask: int, name: str) -> None:
    out = cell_telemetry([1980], [BUSY, mask, BUSY])  # seen once, clocks steady: still void
    assert out["throttle_reasons"] == [name]
    assert void_reason(out) == f"throttled by {name} during the cell"


def test_the_software_power_cap_is_recorded_not_voiding() -> None:
    out = cell_telemetry([1900, 1890], [POWER_CAP])
    assert out["throttle_reasons"] == ["sw_power_cap"] and recorded_reasons(out) == ["sw_power_cap"]
    assert void_reason(out) is None


def test_idle_samples_do_not_count_as_a_drop() -> None:
    """An idle card lowers its clock by design: the 345 MHz idle readings neither drop nor set the peak."""
    out = cell_telemetry([345, 1980, 1975, 345], [IDLE, BUSY, BUSY, IDLE])
    assert out["sm_clock_min_mhz"] == 345 and out["sm_clock_drop"] == pytest.approx(5 / 1980)
    assert void_reason(out) is None


def test_clock_drop_is_from_an_earlier_peak_not_from_the_first_reading() -> None:
    assert clock_drop([(1500.0, 0), (1980.0, 0), (1700.0, 0)]) == pytest.approx(280 / 1980)
    assert clock_drop([(1500.0, 0), (1980.0, 0)]) == 0.0  # a rise is no drop
    assert clock_drop([(1980.0, None), (None, 0)]) is None  # one busy reading says nothing
    assert void_reason({"nvml": "not used: the device is not CUDA"}) is None  # a CPU cell is never void
