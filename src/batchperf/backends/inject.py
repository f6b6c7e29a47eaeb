"""A documented slowdown hook, to prove the gate catches what it should.

Two environment variables, read when a model is loaded (:func:`install` runs in
``batchperf.suite.models.load_model``, the one place every in-process backend's model
comes from, so every forward pass of every backend goes through it):

- ``BATCHPERF_INJECT_SLOWDOWN=0.3``: after each forward pass, wait 0.3 × the
  time that forward pass took (a proportional slowdown of the model's compute).
- ``BATCHPERF_INJECT_DELAY_MS=2``: after each forward pass, wait 2 ms.

The wait is :func:`wait`: exact to microseconds, where a plain sleep overshoots by a VM's wake-up
latency (measured in its docstring), which on short forward passes made the injected slowdown two
or three times the one asked for.

Both may be set; neither set means no hook at all. The ``continuous`` backend's runner runs
the model's weights through its own forward, not the module's: :func:`slowed` wraps that
forward the same way.

vLLM builds its own model, in the process that runs its engine core (the suite's own process
for the ``vllm`` backend, the engine-core process a ``vllm serve`` spawns for ``vllm-server``).
:func:`vllm_plugin` reaches it there: batchperf registers it as a vLLM general plugin
(entry point group ``vllm.general_plugins``, which vLLM loads in every process it starts), and
when either variable is set it hooks the model vLLM's model runner loads, the same way. Unset,
the plugin does nothing.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from batchperf.launch.environ import INJECT_DELAY_MS_ENV, INJECT_SLOWDOWN_ENV
from batchperf.measure.clock import synchronize

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Injection:
    slowdown: float = 0.0  # extra sleep as a fraction of each forward pass's own time
    delay_ms: float = 0.0  # extra sleep per forward pass

    def __post_init__(self) -> None:
        if not (0 <= self.slowdown <= 100):
            raise ValueError(f"{INJECT_SLOWDOWN_ENV} must be a fraction in [0, 100], got {self.slowdown}")
        if not (0 <= self.delay_ms <= 60_000):
            raise ValueError(f"{INJECT_DELAY_MS_ENV} must be milliseconds in [0, 60000], got {self.delay_ms}")

    @property
    def active(self) -> bool:
        return self.slowdown > 0 or self.delay_ms > 0

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Injection:
        env = os.environ if env is None else env
        values = {}
        for field_name, var in (("slowdown", INJECT_SLOWDOWN_ENV), ("delay_ms", INJECT_DELAY_MS_ENV)):
            raw = env.get(var, "").strip()
            if raw:
                try:
                    values[field_name] = float(raw)
                except ValueError:
                    raise ValueError(f"{var}={raw!r} is not a number; unset it or give e.g. {var}=0.3") from None
        return cls(**values)

    def extra_seconds(self, forward_seconds: float) -> float:
        return self.slowdown * forward_seconds + self.delay_ms / 1e3


SPIN_S = 0.002  # the last 2 ms of a wait are spun, not slept: more than a sleep's overshoot here (see wait)


def wait(seconds: float) -> None:
    """Return ``seconds`` from now, as exactly as the clock allows: sleep all but the last :data:`SPIN_S`, then
    spin on the clock. A sleep alone returns late by the host's timer slack and wake-up: 69-103 µs on the 2-core
    VM (two runs, sleeps of 75 µs to 10 ms; ``wait`` 0-2 µs; studies/ab-detector, "The injection"), twice a
    75-µs wait, and vLLM's engine cell slowed "5%" that way read 13% slower in throughput. A spun wait keeps the
    core busy, as the compute it stands for would."""
    deadline = time.perf_counter() + seconds
    if seconds > SPIN_S:
        time.sleep(seconds - SPIN_S)
    while time.perf_counter() < deadline:
        pass


def install(module: Any, injection: Injection | None = None, device: Any = None) -> Any | None:
    """Hook ``module`` (a torch ``nn.Module``) so each forward pass is slowed; returns the hook handles or None."""
    injection = Injection.from_env() if injection is None else injection
    if not injection.active:
        return None
    started: list[float] = []

    def before(_module: Any, _args: Any) -> None:
        synchronize(device)  # time the forward pass itself, not queued work before it
        started.append(time.perf_counter())

    def after(_module: Any, _args: Any, _output: Any) -> None:
        synchronize(device)
        elapsed = time.perf_counter() - started.pop()
        wait(injection.extra_seconds(elapsed))

    return (module.register_forward_pre_hook(before), module.register_forward_hook(after))


def slowed(forward: Callable[..., T], injection: Injection | None = None, device: Any = None) -> Callable[..., T]:
    """``forward`` (a callable that runs one forward pass) slowed as :func:`install` slows a module's."""
    injection = Injection.from_env() if injection is None else injection
    if not injection.active:
        return forward

    def run(*args: Any, **kwargs: Any) -> T:
        synchronize(device)
        started = time.perf_counter()
        out = forward(*args, **kwargs)
        synchronize(device)
        wait(injection.extra_seconds(time.perf_counter() - started))
        return out

    return run


# vLLM's model runners, by module: each loads its model in ``load_model`` and keeps it as ``self.model``
VLLM_RUNNERS = (("vllm.v1.worker.gpu_model_runner", "GPUModelRunner"),
                ("vllm.v1.worker.cpu_model_runner", "CPUModelRunner"))


def vllm_plugin() -> None:
    """vLLM general plugin (``vllm.general_plugins``): with an injection set, every model vLLM's runners load is
    hooked as :func:`install` hooks ours, in whichever process vLLM runs it. Without one, nothing is imported."""
    injection = Injection.from_env()
    if not injection.active:
        return
    import importlib

    for module_name, class_name in VLLM_RUNNERS:
        try:
            runner = getattr(importlib.import_module(module_name), class_name)
        except (ImportError, AttributeError):
            continue  # another platform's runner, or another vLLM's layout
        _hook_load_model(runner, injection)


def _hook_load_model(runner: type, injection: Injection) -> None:
    """Wrap ``runner.load_model`` (once: CPUModelRunner's may call GPUModelRunner's) so the model it leaves in
    ``self.model`` is hooked."""
    load_model = runner.__dict__.get("load_model")
    if load_model is None or getattr(load_model, "_batchperf_injection", False):
        return

    def hooked(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = load_model(self, *args, **kwargs)
        model = getattr(self, "model", None)
        if model is not None and not getattr(model, "_batchperf_injected", False):
            install(model, injection, getattr(self, "device", None))
            model._batchperf_injected = True
        return out

    hooked._batchperf_injection = True  # type: ignore[attr-defined]
    runner.load_model = hooked  # type: ignore[attr-defined]
