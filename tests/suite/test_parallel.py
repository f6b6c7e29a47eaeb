"""Tensor-parallel cells: skipped with a reason when this process sees fewer GPUs; tp reaches the backend."""

import pytest

from batchperf.backends import _REGISTRY, create_backend
from batchperf.suite.matrix import TIERS, narrowed
from batchperf.suite.parallel import tp_skip_reason
from batchperf.suite.pool import BackendPool


def vllm_cell(tier: str, tp: str):
    (cell,) = narrowed(TIERS[tier], models="m", backends="vllm", batch_sizes="8", prompt_lens="128",
                       concurrency="16", tp=tp).cells()
    return cell.resolve()


def test_tp1_never_skips() -> None:
    assert tp_skip_reason(vllm_cell("gpu", "1")) is None


def test_tp_beyond_the_visible_gpus_skips_with_the_count(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("batchperf.suite.parallel.visible_gpus", lambda: 1)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    reason = tp_skip_reason(vllm_cell("gpu", "2"))
    assert reason is not None and reason.startswith("tp=2 needs 2 GPUs, this process sees 1 (CUDA_VISIBLE_DEVICES=3)")
    monkeypatch.setattr("batchperf.suite.parallel.visible_gpus", lambda: 2)
    assert tp_skip_reason(vllm_cell("gpu", "2")) is None


def test_tp_on_the_cpu_tier_skips() -> None:
    assert "measured on GPUs only" in (tp_skip_reason(vllm_cell("cpu", "2")) or "")


class Recorder:
    name = "recorder"

    def __init__(self, model: object, *, tensor_parallel_size: int = 1) -> None:
        self.tp = tensor_parallel_size

    def run(self, workload, batch_size, concurrency):  # pragma: no cover - not run here
        raise NotImplementedError

    def close(self) -> None:
        pass


def test_tp_reaches_the_backend_and_each_tp_gets_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(_REGISTRY, "test-tp-recorder", Recorder)
    pool = BackendPool()
    model = object()
    one, two = pool.get("test-tp-recorder", model), pool.get("test-tp-recorder", model, tp=2)
    assert (one.tp, two.tp) == (1, 2) and pool.get("test-tp-recorder", model, tp=2) is two


def test_backend_without_tp_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(_REGISTRY, "test-no-tp", lambda model: Recorder(model))
    with pytest.raises(ValueError, match="backend 'test-no-tp' does not take tensor_parallel_size"):
        create_backend("test-no-tp", object(), tensor_parallel_size=2)
