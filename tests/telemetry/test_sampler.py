"""The telemetry sampler, on the CPU and against a fake NVML module."""

from __future__ import annotations

import mmap
import time
from typing import Any

import psutil
import pytest
from cpu_burner import Burner
from fake_nvml import FakeNvml, NVMLError

from batchperf.telemetry.gpu_clocks import void_reason
from batchperf.telemetry.sampler import Sampler, _integrate, summarise_telemetry


def one_gpu(**readings: Any) -> FakeNvml:
    """A fake NVML with one device: 1000 bytes used, 50 % busy, 100 W unless given; an energy counter if given."""
    return FakeNvml([{"memory_used": 1000, "util": 50, "power_mw": 100_000} | readings])


def test_cpu_cell_reports_its_own_peak_rss_and_no_nvml():
    before = psutil.Process().memory_info().rss
    with Sampler("cpu", interval_s=0.01) as s:
        # fresh anonymous pages, each written: malloc in a long-lived (xdist) worker may hand back memory that is
        # already resident, and then RSS does not grow at all (seen: +4 KB for a 64 MiB numpy array)
        block = mmap.mmap(-1, 64 * 2**20)
        for offset in range(0, len(block), mmap.PAGESIZE):
            block[offset] = 1
        taken, deadline = len(s._times), time.monotonic() + 10
        while len(s._times) < taken + 3 and time.monotonic() < deadline:  # held until sampled, however loaded
            time.sleep(0.01)
        block.close()
    out = s.summary(output_tokens=10)
    assert out["nvml"].startswith("not used")
    assert out["samples"] >= 3
    assert out["cell_peak_rss_bytes"] >= before + 48 * 2**20
    assert out["process_peak_rss_bytes"] >= before + 48 * 2**20  # the lifetime peak includes this cell
    assert "torch_peak_allocated_bytes" not in out  # CUDA only
    assert "energy_j" not in out and "joules_per_output_token" not in out
    assert 0 < out["sampler_cpu_s"] < out["duration_s"]


def test_energy_per_token_from_the_total_energy_counter():
    fake = one_gpu(energy_mj=[1_000_000, 1_012_000], memory_used=[2_000, 6_000, 4_000], util=[10, 90, 50])
    with Sampler("cpu", interval_s=0.01, nvml_module=fake) as s:
        time.sleep(0.05)
    out = s.summary(output_tokens=6)
    assert out["nvml"] == "ok"
    assert out["energy_source"] == "total_energy_counter"
    assert out["energy_j"] == pytest.approx(12.0)
    assert out["joules_per_output_token"] == pytest.approx(2.0)
    assert out["gpu_memory_used_peak_bytes"] == 6_000
    assert out["gpu_util_peak_pct"] == 90
    n = fake.times_read("power_mw")  # one reading per sample; the first three differ, the rest repeat the last
    assert out["gpu_memory_used_mean_bytes"] == pytest.approx((2_000 + 6_000 + 4_000 * (n - 2)) / n)
    assert fake.shutdowns == 1


def test_energy_integrates_power_when_the_counter_is_not_supported():
    fake = one_gpu(power_mw=100_000)  # a constant 100 W, and no energy counter (before Volta)
    with Sampler("cpu", interval_s=0.01, nvml_module=fake) as s:
        time.sleep(0.05)
    out = s.summary(output_tokens=4)
    assert out["energy_source"] == "power_samples"
    # the samples span at least the 50 ms slept: at least 5 J at 100 W
    assert 5.0 <= out["energy_j"] <= 100 * out["duration_s"] + 1e-9
    assert out["joules_per_output_token"] == pytest.approx(out["energy_j"] / 4)


def test_nvml_that_cannot_start_leaves_the_cell_running():
    fake = FakeNvml(init_error="NVML Shared Library Not Found")
    with Sampler("cpu", interval_s=0.01, nvml_module=fake) as s:
        time.sleep(0.02)
    out = s.summary(output_tokens=4)
    assert out["nvml"] == "unavailable: NVML Shared Library Not Found"
    assert out["samples"] >= 2 and out["cell_peak_rss_bytes"] > 0
    assert "gpu_util_mean_pct" not in out


def test_nvml_that_fails_mid_cell_keeps_what_it_had_and_says_so():
    fake = one_gpu(energy_mj=[5_000, 9_000], memory_used=[1000, 1000, NVMLError("GPU is lost")])
    with Sampler("cpu", interval_s=0.01, nvml_module=fake) as s:
        time.sleep(0.05)
    out = s.summary(output_tokens=2)
    assert out["nvml"] == "failed during the cell: GPU is lost"
    assert out["samples"] > 2  # RSS sampling went on
    assert out["energy_source"] == "power_samples"  # the counter's end was never read
    assert fake.shutdowns == 1


def test_summary_needs_a_finished_block_and_interval_must_be_positive():
    with pytest.raises(RuntimeError, match="finished"):
        Sampler("cpu").summary()
    with pytest.raises(ValueError, match="interval_s"):
        Sampler("cpu", interval_s=0)


def test_trapezoid_integration():
    assert _integrate((0.0, 1.0, 3.0), (10.0, 20.0, 20.0)) == pytest.approx(15.0 + 40.0)


class _Backend:
    """Records, for each run, whether the sampler was watching."""

    name = "fake"

    def __init__(self, sampler: Sampler) -> None:
        self.sampler = sampler
        self.watched: list[bool] = []

    def run(self, workload, batch_size, concurrency):
        from batchperf.measure.trace import RequestTrace, RunTrace

        self.watched.append(self.sampler._thread is not None and self.sampler._thread.is_alive())
        reqs = [RequestTrace(r.request_id, r.prompt_len, r.target_len, 0.0, 0.0, (0.1, 0.2)) for r in workload.requests]
        return RunTrace(self.name, batch_size, concurrency, reqs, end=0.2)

    def close(self) -> None:
        pass


def test_run_cell_samples_the_measured_run_only():
    from batchperf.backends.cell_run import run_cell
    from batchperf.workload.spec import LengthSpec, WorkloadSpec

    workload = WorkloadSpec(3, LengthSpec.parse("8"), num_warmup=1).build(100, 64)
    sampler = Sampler("cpu", interval_s=0.01)
    backend = _Backend(sampler)
    trace = run_cell(backend, workload, 2, 2, sampler=sampler)
    assert backend.watched == [False, True]  # warm-up unwatched, measured run watched
    assert trace.telemetry["samples"] >= 2 and trace.telemetry["cell_peak_rss_bytes"] > 0
    assert trace.to_dict()["telemetry"] == trace.telemetry


def test_a_cell_keeps_the_last_rounds_telemetry_and_the_median_per_token():
    rounds = [{"cpu_s": 1.0, "cpu_seconds_per_output_token": 0.004, "cell_peak_rss_bytes": 10},
              {"cpu_s": 3.0, "cpu_seconds_per_output_token": 0.009, "cell_peak_rss_bytes": 30,
               "joules_per_output_token": 2.0},
              {"cpu_s": 2.0, "cpu_seconds_per_output_token": 0.005, "cell_peak_rss_bytes": 20}]
    out = summarise_telemetry(rounds)
    assert out["cpu_s"] == 2.0 and out["cell_peak_rss_bytes"] == 20  # the last round's
    assert out["cpu_seconds_per_output_token"] == 0.005  # the median of 0.004, 0.009, 0.005, not the last's
    assert out["joules_per_output_token"] == 2.0  # the median of the rounds that have it
    assert rounds[-1]["cpu_seconds_per_output_token"] == 0.005 and "joules_per_output_token" not in rounds[-1]
    assert summarise_telemetry([]) == {}


def test_a_throttle_or_clock_fall_in_any_round_reaches_the_cells_telemetry_and_voids_it():
    """The void rule reads the cell's telemetry; it used to be the last round's alone, so a card that throttled in
    round 1 of 3 and recovered was judged. Now every round's throttle reasons count, and the SM clock's fall is the
    largest within a round or from an earlier round's start to a later round's lowest."""
    steady = {"sm_clock_start_mhz": 1980, "sm_clock_min_mhz": 1965, "sm_clock_drop": 0.008,
              "throttle_reasons": ["sw_power_cap"], "temperature_peak_c": 70}
    hot = {"sm_clock_start_mhz": 1980, "sm_clock_min_mhz": 1700, "sm_clock_drop": 280 / 1980,
           "throttle_reasons": ["hw_thermal_slowdown"], "temperature_peak_c": 88}
    out = summarise_telemetry([hot, steady, steady])
    assert out["throttle_reasons"] == ["hw_thermal_slowdown", "sw_power_cap"] and out["temperature_peak_c"] == 88
    assert out["sm_clock_drop"] == pytest.approx(280 / 1980) and out["sm_clock_min_mhz"] == 1700
    assert "hw_thermal_slowdown" in void_reason(out) and "fell 14.1%" in void_reason(out)

    sagging = [{"sm_clock_start_mhz": c, "sm_clock_min_mhz": c - 10, "sm_clock_drop": 10 / c, "throttle_reasons": []}
               for c in (1980, 1900, 1820)]  # each round steady, the card slower every round: 8.6% over the cell
    out = summarise_telemetry(sagging)
    assert out["sm_clock_drop"] == pytest.approx((1980 - 1810) / 1980) and out["sm_clock_start_mhz"] == 1980
    assert "fell 8.6%" in void_reason(out)

    assert void_reason(summarise_telemetry([steady] * 3)) is None
    cpu = summarise_telemetry([{"cpu_s": 1.0}, {"cpu_s": 2.0}])
    assert cpu == {"cpu_s": 2.0}  # no GPU read: nothing added


BURN_S = 0.5  # CPU seconds the fake server burns in the round
# what of it the sampler can read: /proc counts CPU time in clock ticks (10 ms), and the sampler thread's own time is
# taken off the total
READ_S = 0.9 * BURN_S


@pytest.mark.parametrize("in_tree", [False, True], ids=["outside the tree", "also a child"])
def test_a_kept_servers_cpu_time_in_the_round_is_counted_once(tmp_path, in_tree: bool):
    """A kept server (outside this process's tree, for every process of a side but the one that started it) burns
    CPU for the cell: cpu_s counts it, as it counts a server this process started; a process that is both named and
    a child is counted once. Issue 56: with kept servers, CPU per token missed the server and saw no slowdown."""
    burner = Burner.start(tmp_path, BURN_S, detach=not in_tree)
    try:
        assert (burner.pid in {c.pid for c in psutil.Process().children(recursive=True)}) == in_tree
        with Sampler("cpu", interval_s=0.05).counting_also([burner.pid]) as s:
            burner.burn()
        out = s.summary(output_tokens=100)
    finally:
        burner.stop()
    # this process only waited (sleeps); twice the burn would be a process counted twice
    assert READ_S <= out["cpu_s"] < 1.5 * BURN_S
    assert out["cpu_seconds_per_output_token"] == out["cpu_s"] / 100


def test_a_process_outside_the_tree_is_not_counted_unless_named(tmp_path):
    burner = Burner.start(tmp_path, BURN_S, detach=True)
    try:
        with Sampler("cpu", interval_s=0.05) as s:
            burner.burn()
    finally:
        burner.stop()
    assert s.summary()["cpu_s"] < 0.5 * BURN_S  # what the kept-server rows read before (docs/ab.md)


def test_a_named_process_that_is_gone_is_left_out():
    gone = psutil.Popen(["true"])
    gone.wait()
    with Sampler("cpu", interval_s=0.05).counting_also([gone.pid]) as s:
        pass
    assert s._outside_roots == [] and "cpu_s" in s.summary()  # nothing of it to read, and no error
