"""What a GPU run must get right, checked on the CPU with fakes of torch.cuda and NVML.

- the clock: the device is synchronised before every clock read, and every token's timestamp is such a read,
  taken after the forward pass that made the token (no host-side time of work still queued on the device);
- torch's peak memory is reset when a cell starts, so a cell reports its own peak, not an earlier cell's;
- the SM clock and throttle reasons seen during a cell are in its telemetry, and in the fingerprint's soft facts;
- vLLM's gpu_memory_utilization leaves room for the suite's own HF copy of the model; one engine at a time.
"""

from __future__ import annotations

import importlib.util
import sys
import time
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from fake_nvml import FakeNvml

from batchperf.backends import BackendUnavailable, _vllm, vllm_engine
from batchperf.backends.continuous import ContinuousBackend
from batchperf.backends.hf_static import HFStaticBackend
from batchperf.measure import clock as clock_module
from batchperf.measure.clock import RunClock
from batchperf.regress import fingerprint
from batchperf.telemetry.sampler import Sampler
from batchperf.workload.spec import LengthSpec, WorkloadSpec

CUDA = torch.device("cuda")
GIB = 2**30


class Log:
    """One list of what happened, in order: device syncs, forward passes, and clock reads (with their values)."""

    def __init__(self) -> None:
        self.events: list[Any] = []

    def sync(self, device: Any = None) -> None:
        self.events.append("sync")

    def read(self) -> float:
        value = time.perf_counter()
        self.events.append(("read", value))
        return value

    def reads_after(self, *before: str) -> list[float]:
        """Values of the reads immediately preceded by ``before`` (e.g. "forward", "sync")."""
        n = len(before)
        return [e[1] for i, e in enumerate(self.events)
                if isinstance(e, tuple) and i >= n and tuple(self.events[i - n:i]) == before]


@pytest.fixture
def log(monkeypatch: pytest.MonkeyPatch) -> Log:
    """torch.cuda.synchronize and the clock's perf_counter, recorded (torch.cuda itself is never touched)."""
    recorder = Log()
    monkeypatch.setattr(torch.cuda, "synchronize", recorder.sync)
    monkeypatch.setattr(clock_module, "time", SimpleNamespace(perf_counter=recorder.read, sleep=time.sleep))
    return recorder


def token_times(trace: Any) -> set[float]:
    return {t for r in trace.requests for t in r.token_times}


def relative(values: list[float], start: float) -> set[float]:
    return {v - start for v in values}


def small_workload(model: Any) -> Any:
    return WorkloadSpec(num_prompts=4, prompt_len=LengthSpec.parse("5,9"), output_lens=(2, 3)).build(
        model.vocab_size, model.max_model_len)


def test_a_cuda_clock_synchronises_before_every_read(log: Log) -> None:
    clock = RunClock(CUDA)
    clock.start()
    clock.now()
    clock.now()
    assert [e if e == "sync" else e[0] for e in log.events] == ["sync", "read"] * 3


def test_a_cpu_clock_never_touches_cuda(log: Log) -> None:
    clock = RunClock(torch.device("cpu"))
    clock.start()
    clock.now()
    assert "sync" not in log.events


def test_continuous_stamps_each_token_after_its_forward_and_a_sync(tiny_model, log: Log) -> None:
    """The tiny model computes on the CPU while the backend's clock believes it is on CUDA: every step is
    forward pass -> torch.cuda.synchronize -> clock read, and that read is the step's token time."""
    on_cuda = replace(tiny_model, device=CUDA)
    backend = ContinuousBackend(on_cuda)
    forward = backend.runner.run

    def logged_forward(step: Any) -> Any:
        out = forward(step)
        log.events.append("forward")
        return out

    backend.runner.run = logged_forward  # type: ignore[method-assign]
    trace = backend.run(small_workload(tiny_model), batch_size=2, concurrency=2)
    start = log.reads_after("sync")[0]  # clock.start()
    stamped = relative(log.reads_after("forward", "sync"), start)
    assert token_times(trace) and token_times(trace) <= stamped
    assert log.events.count("sync") == sum(isinstance(e, tuple) for e in log.events), "a read without a sync"


def test_hf_static_token_times_are_synchronised_reads(tiny_model, log: Log, monkeypatch: pytest.MonkeyPatch) -> None:
    """generate's streamer reads the clock for each step's tokens; each read follows a device sync."""
    monkeypatch.setattr(clock_module, "synchronize", log.sync)  # the model is on the CPU: record the call itself
    trace = HFStaticBackend(tiny_model).run(small_workload(tiny_model), batch_size=2, concurrency=2)
    start = log.reads_after("sync")[0]
    assert token_times(trace) <= relative(log.reads_after("sync"), start)
    assert log.events.count("sync") == sum(isinstance(e, tuple) for e in log.events)


class FakeCudaMemory:
    """torch.cuda's allocator statistics: what is allocated now, and the peak since the last reset."""

    def __init__(self) -> None:
        self.current = self.peak = self.resets = 0

    def allocate(self, n: int) -> None:
        self.current += n
        self.peak = max(self.peak, self.current)

    def reset_peak_memory_stats(self, device: Any = None) -> None:
        self.resets += 1
        self.peak = self.current

    def max_memory_allocated(self, device: Any = None) -> int:
        return self.peak

    def max_memory_reserved(self, device: Any = None) -> int:
        return self.peak + 512


def fake_gpu(clocks: list[int], throttle: list[int]) -> FakeNvml:
    """A device NVML can read: memory, utilisation, power, energy, SM clock and throttle reasons; torch's
    device 0 (``fake_cuda``) by its UUID."""
    return FakeNvml([{"uuid": "GPU-fake-uuid", "name": "NVIDIA H200", "memory_used": GIB, "memory_total": 80 * GIB,
                      "util": 90, "power_mw": 300_000, "energy_mj": 1000, "clock_sm": clocks, "throttle": throttle,
                      "max_clock_sm": 1980, "enforced_power_limit_mw": 700_000}])


@pytest.fixture
def fake_cuda(monkeypatch: pytest.MonkeyPatch) -> FakeCudaMemory:
    memory = FakeCudaMemory()
    for name in ("reset_peak_memory_stats", "max_memory_allocated", "max_memory_reserved"):
        monkeypatch.setattr(torch.cuda, name, getattr(memory, name))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: SimpleNamespace(uuid="fake-uuid"))
    return memory


def test_each_cell_reports_its_own_torch_peak(fake_cuda: FakeCudaMemory) -> None:
    """Cell 1 peaks at 1000 bytes and frees them; cell 2 only reaches 300: without the reset at the start of a
    cell, cell 2 would report cell 1's 1000."""
    peaks = []
    for cell_bytes in (1000, 300):
        with Sampler(CUDA, interval_s=0.01, nvml_module=fake_gpu([1980], [0])) as sampler:
            fake_cuda.allocate(cell_bytes)
            fake_cuda.allocate(-cell_bytes)
        peaks.append(sampler.summary()["torch_peak_allocated_bytes"])
    assert peaks == [1000, 300] and fake_cuda.resets == 2


def test_sm_clock_and_throttle_reasons_seen_during_a_cell(fake_cuda: FakeCudaMemory) -> None:
    gpu = fake_gpu(clocks=[1980, 1500], throttle=[0x1, 0x4 | 0x1])  # idle first, then capped by power
    with Sampler(CUDA, interval_s=0.01, nvml_module=gpu) as sampler:
        time.sleep(0.05)
    out = sampler.summary(output_tokens=10)
    assert out["nvml"] == "ok" and out["sm_clock_min_mhz"] == 1500 and 1500 <= out["sm_clock_mean_mhz"] < 1980
    assert out["throttle_reasons"] == ["sw_power_cap"]  # gpu_idle is not a slowdown


def test_throttle_reasons_are_soft_fingerprint_facts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_gpu(clocks=[1410], throttle=[0x40]))  # what NVML opens
    fp = fingerprint.current()
    gpu = fp.soft["gpus"][0]
    assert gpu["sm_clock_mhz"] == 1410 and gpu["throttle_reasons"] == ["hw_thermal_slowdown"]
    assert fp.identity.gpus[0].name == "NVIDIA H200"  # identity: unchanged by the soft facts
    warning = fingerprint.soft_warnings({}, fp.soft)
    assert any("clocks throttled (hw_thermal_slowdown) at 1410 of 1980 MHz" in w for w in warning)


@pytest.mark.parametrize(("free", "total", "model", "kv", "expected"), [
    # an H200 with a 1 GiB model resident: all but 4 GiB of headroom, capped at vLLM's own 0.9
    (138 * GIB, 141 * GIB, 1 * GIB, GIB // 2, 0.9),
    # an L4 (24 GiB) with Qwen2.5-1.5B (3 GiB) resident: 20 free - 4 headroom = 16 of 24
    (20 * GIB, 24 * GIB, 3 * GIB, GIB, 0.666),
    # an A100-80GB with Llama-2-7B in fp16 (13.5 GiB): headroom is the model's own size
    (66 * GIB, 80 * GIB, int(13.5 * GIB), 2 * GIB, 0.656),
])
def test_gpu_memory_utilization_leaves_room_for_the_hf_copy(free: int, total: int, model: int, kv: int,
                                                            expected: float) -> None:
    util = _vllm.gpu_memory_utilization(free, total, model, kv)
    assert util == expected
    assert util * total <= free - max(model, _vllm.MIN_SUITE_HEADROOM_BYTES)  # vLLM starts: it asks for no more
    assert util * total >= model + kv  # and holds its weights and one full-length request


def test_a_card_too_small_for_two_copies_says_so() -> None:
    # Llama-2-7B fp16 on an L4: 10 GiB free beside the HF copy; vLLM's own copy and its KV cannot fit
    with pytest.raises(BackendUnavailable, match=r"vLLM cannot fit beside.*10\.0 of 24\.0 GiB free.*-k vllm"):
        _vllm.gpu_memory_utilization(10 * GIB, 24 * GIB, int(13.5 * GIB), 2 * GIB)
    with pytest.raises(ValueError, match="makes no sense"):
        _vllm.gpu_memory_utilization(30 * GIB, 24 * GIB, GIB, GIB)


def test_utilization_is_read_from_the_card_now(tiny_model, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (20 * GIB, 24 * GIB))
    util = _vllm.cuda_memory_utilization(replace(tiny_model, device=CUDA))
    assert util == _vllm.gpu_memory_utilization(20 * GIB, 24 * GIB, tiny_model.weight_bytes(),
                                                2 * 4 * 2 * 32 * 4 * tiny_model.max_model_len)


def test_a_new_engine_on_the_gpu_shuts_the_others_down(monkeypatch: pytest.MonkeyPatch) -> None:
    closed = []

    class Holder:
        def close(self) -> None:
            closed.append(self)
            vllm_engine._ON_GPU.discard(self)  # type: ignore[arg-type]

    holders = [Holder(), Holder()]
    monkeypatch.setattr(vllm_engine, "_ON_GPU", set(holders))
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: closed.append("empty_cache"))
    vllm_engine._free_the_gpu()
    assert set(closed[:2]) == set(holders) and closed[2] == "empty_cache" and not vllm_engine._ON_GPU


def test_dummy_weights_reach_vllm_as_its_dummy_load_format() -> None:
    assert _vllm.weights_args("dummy") == {"load_format": "dummy", "skip_tokenizer_init": True}
    assert _vllm.weights_flags("dummy") == ["--load-format", "dummy", "--skip-tokenizer-init"]
    assert _vllm.weights_args("checkpoint") == {} and _vllm.weights_flags("checkpoint") == []


def test_a_gpu_tier_model_on_the_cpu_gets_a_small_vllm_step_budget(tiny_model) -> None:
    gpu_tier = replace(tiny_model, spec=replace(tiny_model.spec, tier="gpu"))
    assert _vllm.step_budget_args(gpu_tier, 2) == {"max_num_batched_tokens": _vllm.CPU_STEP_TOKENS}
    assert _vllm.step_budget_args(gpu_tier, 512) == {"max_num_batched_tokens": 512}  # never below max_num_seqs
    assert _vllm.step_budget_args(tiny_model, 2) == {}  # the CPU tier keeps vLLM's defaults
    assert _vllm.step_budget_args(replace(gpu_tier, device=CUDA), 2) == {}  # and so does a GPU


def test_the_server_on_a_gpu_gets_the_dummy_flags_and_its_memory_share(tiny_model,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("aiohttp")
    from batchperf.backends import vllm_server

    started = []

    class Server:
        def __init__(self, argv: list[str], *args: Any, **kwargs: Any) -> None:
            started.append(argv)

        def start(self, timeout: float) -> None:
            pass

    monkeypatch.setattr(vllm_server, "ServerProcess", Server)
    monkeypatch.setattr(vllm_server, "cuda_memory_utilization", lambda model: 0.42)
    monkeypatch.delenv("BATCHPERF_SERVER_URL", raising=False)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object())  # "vLLM is installed"
    backend = vllm_server.VLLMServerBackend(replace(tiny_model, device=CUDA, weights="dummy"))
    backend._start_server(8)
    argv = started[0]
    assert argv[argv.index("--gpu-memory-utilization") + 1] == "0.42"
    assert argv[argv.index("--load-format") + 1] == "dummy" and "--skip-tokenizer-init" in argv
    assert "--max-num-batched-tokens" not in argv
