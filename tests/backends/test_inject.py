"""The slowdown hook: parsed from the environment, sleeping in proportion to each forward pass."""

from __future__ import annotations

import pytest
import torch

from batchperf.backends import inject
from batchperf.backends.inject import Injection


def test_from_env() -> None:
    assert not Injection.from_env({}).active
    got = Injection.from_env({inject.ENV_SLOWDOWN: "0.3", inject.ENV_DELAY_MS: " 2 "})
    assert got == Injection(0.3, 2.0) and got.extra_seconds(0.010) == pytest.approx(0.005)
    with pytest.raises(ValueError, match="BATCHPERF_INJECT_SLOWDOWN='x' is not a number"):
        Injection.from_env({inject.ENV_SLOWDOWN: "x"})
    with pytest.raises(ValueError, match="must be a fraction"):
        Injection.from_env({inject.ENV_SLOWDOWN: "-1"})


def test_hook_sleeps_after_every_forward_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    sleeps: list[float] = []
    clock = iter([1.0, 1.5, 2.0, 2.1])  # two forward passes: 0.5 s and 0.1 s
    monkeypatch.setattr(inject.time, "perf_counter", lambda: next(clock))
    monkeypatch.setattr(inject.time, "sleep", sleeps.append)
    model = torch.nn.Linear(2, 2)
    assert inject.install(model, Injection(slowdown=0.3, delay_ms=1.0)) is not None
    model(torch.zeros(1, 2))
    model(torch.zeros(1, 2))
    assert sleeps == pytest.approx([0.3 * 0.5 + 0.001, 0.3 * 0.1 + 0.001])


def test_no_injection_installs_nothing() -> None:
    model = torch.nn.Linear(2, 2)
    assert inject.install(model, Injection()) is None
    assert not model._forward_hooks and not model._forward_pre_hooks
