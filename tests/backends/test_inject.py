"""The slowdown hook: parsed from the environment, waiting in proportion to each forward pass."""

from __future__ import annotations

import pytest
import torch

from batchperf.backends import inject
from batchperf.backends.inject import Injection
from batchperf.launch.environ import INJECT_DELAY_MS_ENV, INJECT_SLOWDOWN_ENV


def test_from_env() -> None:
    assert not Injection.from_env({}).active
    got = Injection.from_env({INJECT_SLOWDOWN_ENV: "0.3", INJECT_DELAY_MS_ENV: " 2 "})
    assert got == Injection(0.3, 2.0) and got.extra_seconds(0.010) == pytest.approx(0.005)
    with pytest.raises(ValueError, match="BATCHPERF_INJECT_SLOWDOWN='x' is not a number"):
        Injection.from_env({INJECT_SLOWDOWN_ENV: "x"})
    with pytest.raises(ValueError, match="must be a fraction"):
        Injection.from_env({INJECT_SLOWDOWN_ENV: "-1"})


def test_hook_waits_after_every_forward_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    sleeps: list[float] = []
    clock = iter([1.0, 1.5, 2.0, 2.1])  # two forward passes: 0.5 s and 0.1 s
    monkeypatch.setattr(inject.time, "perf_counter", lambda: next(clock))
    monkeypatch.setattr(inject, "wait", sleeps.append)
    model = torch.nn.Linear(2, 2)
    assert inject.install(model, Injection(slowdown=0.3, delay_ms=1.0)) is not None
    model(torch.zeros(1, 2))
    model(torch.zeros(1, 2))
    assert sleeps == pytest.approx([0.3 * 0.5 + 0.001, 0.3 * 0.1 + 0.001])


class FakeTime:
    """A clock that each read moves on by ``tick``, and a sleep that returns ``late`` after its time (a VM's
    wake-up), so a wait's accuracy can be checked without timing anything."""

    def __init__(self, tick: float, late: float) -> None:
        self.now, self.tick, self.late, self.slept = 100.0, tick, late, []

    def perf_counter(self) -> float:
        self.now += self.tick
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds + self.late


@pytest.mark.parametrize("seconds", [0.0, 75e-6, 0.0015, 0.002, 0.010, 0.5])
def test_wait_is_exact_where_a_sleep_returns_late(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    """A wait sleeps all but the last SPIN_S and spins the rest, so a sleep that wakes 0.5 ms late (as on a VM)
    costs nothing; waits shorter than SPIN_S (vLLM's forward passes slowed 5%: ~75 µs) never sleep at all."""
    fake = FakeTime(tick=1e-6, late=0.0005)
    monkeypatch.setattr(inject, "time", fake)
    start = fake.now
    inject.wait(seconds)
    assert fake.slept == ([seconds - inject.SPIN_S] if seconds > inject.SPIN_S else [])
    assert seconds <= fake.now - start <= seconds + 3e-6  # on time, to the clock's tick


def test_no_injection_installs_nothing() -> None:
    model = torch.nn.Linear(2, 2)
    assert inject.install(model, Injection()) is None
    assert not model._forward_hooks and not model._forward_pre_hooks


def fake_runners(monkeypatch: pytest.MonkeyPatch) -> tuple[type, type]:
    """A GPU-style runner and a CPU runner whose load_model calls its parent's, as vLLM's may, in a fake module."""
    import sys
    import types

    class GPURunner:
        def load_model(self) -> None:
            self.model = torch.nn.Linear(2, 2)

    class CPURunner(GPURunner):
        def load_model(self) -> None:
            super().load_model()

    module = types.ModuleType("fake_vllm_runners")
    module.GPURunner, module.CPURunner = GPURunner, CPURunner  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "fake_vllm_runners", module)
    monkeypatch.setattr(inject, "VLLM_RUNNERS", (("fake_vllm_runners", "GPURunner"), ("fake_vllm_runners",
                                                                                        "CPURunner"),
                                                 ("no_such_vllm_module", "Runner")))
    return GPURunner, CPURunner


def test_vllm_plugin_hooks_the_model_vllm_loads_once(monkeypatch: pytest.MonkeyPatch) -> None:
    _gpu, cpu = fake_runners(monkeypatch)
    monkeypatch.setenv(INJECT_DELAY_MS_ENV, "3")
    sleeps: list[float] = []
    monkeypatch.setattr(inject, "wait", sleeps.append)
    inject.vllm_plugin()
    inject.vllm_plugin()  # vLLM may load its plugins more than once: still one hook
    runner = cpu()
    runner.load_model()
    assert len(runner.model._forward_hooks) == 1 and len(runner.model._forward_pre_hooks) == 1
    runner.model(torch.zeros(1, 2))
    assert sleeps == pytest.approx([0.003])


def test_vllm_plugin_does_nothing_without_an_injection(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu, cpu = fake_runners(monkeypatch)
    load_model = cpu.load_model
    monkeypatch.delenv(INJECT_SLOWDOWN_ENV, raising=False)
    monkeypatch.delenv(INJECT_DELAY_MS_ENV, raising=False)
    inject.vllm_plugin()
    assert cpu.load_model is load_model
    runner = cpu()
    runner.load_model()
    assert not runner.model._forward_hooks


def test_vllm_plugin_is_registered_with_vllm() -> None:
    from importlib.metadata import entry_points

    found = [e for e in entry_points(group="vllm.general_plugins") if e.value.startswith("batchperf.")]
    assert [e.load() for e in found] == [inject.vllm_plugin]
