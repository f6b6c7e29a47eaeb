"""The ``hf-continuous`` backend (transformers' continuous batching) on the tiny CPU model."""

from __future__ import annotations

import pytest

from batchperf.backends import create_backend
from batchperf.backends.cell_run import run_cell
from batchperf.measure.counters import ABSENT, COUNTERS
from batchperf.measure.metrics import compute_metrics
from batchperf.workload.spec import LengthSpec, WorkloadSpec


@pytest.fixture(scope="module")
def tiny(tiny_model):
    return tiny_model


@pytest.fixture(scope="module")
def backend(tiny):
    b = create_backend("hf-continuous", tiny)
    yield b
    b.close()


def workload(tiny, n: int = 4, prompt: str = "16,24", warmup: int = 0, seed: int = 0):
    spec = WorkloadSpec(num_prompts=n, prompt_len=LengthSpec.parse(prompt), output_lens=(3, 5),
                        num_warmup=warmup, seed=seed)
    return spec.build(tiny.vocab_size, tiny.max_model_len)


def test_counts_match_targets_and_times_are_per_token(backend, tiny) -> None:
    attn_before = tiny.model.config._attn_implementation
    trace = run_cell(backend, workload(tiny, warmup=1), 4, 4)
    assert [r.output_len for r in trace.requests] == [r.target_len for r in trace.requests]
    assert trace.warmup_excluded == 1
    for r in trace.requests:
        assert r.error is None
        assert 0 <= r.arrival <= r.scheduled <= r.token_times[0]
        assert all(a < b for a, b in zip(r.token_times, r.token_times[1:]))
        assert r.kv_tokens == r.prompt_len + r.output_len - 1
    assert trace.end == max(r.token_times[-1] for r in trace.requests)
    m = compute_metrics(trace)
    assert m["n_itl"] == sum(r.target_len - 1 for r in trace.requests)
    assert tiny.model.config._attn_implementation == attn_before, "the model is left as other backends expect"


def test_engine_steps_are_the_managers_forward_passes_of_each_run(backend, tiny) -> None:
    # one request: one step prefills it and gives its first token, then one step per further token
    runs = [backend.run(workload(tiny, n=1, seed=7), 4, 1) for _ in range(2)]
    for trace in runs:  # the manager is kept: each run counts its own steps, not the manager's total
        assert trace.counters["engine_steps"] == trace.requests[0].target_len
    assert set(runs[0].counters[ABSENT]) == {c.name for c in COUNTERS} - {"engine_steps"}  # each with its reason


def test_closed_loop_honours_concurrency(backend, tiny) -> None:
    trace = backend.run(workload(tiny, n=4, seed=1), 4, 2)
    finishes = {r.finished for r in trace.requests}
    assert all(r.arrival in finishes for r in trace.requests[2:])  # each waited for a free slot


def test_manager_is_kept_across_runs_and_rebuilt_for_another_batch_size(backend, tiny) -> None:
    backend.run(workload(tiny, n=2, seed=2), 4, 4)
    kept = backend._manager
    backend.run(workload(tiny, n=2, seed=3), 4, 4)
    assert backend._manager is kept
    trace = backend.run(workload(tiny, n=3, seed=4), 2, 3)
    assert backend._manager is not kept
    assert backend._manager.continuous_batching_config.max_requests_per_batch == 2
    assert [r.output_len for r in trace.requests] == [r.target_len for r in trace.requests]


def test_close_releases_the_manager(tiny) -> None:
    b = create_backend("hf-continuous", tiny)
    b.run(workload(tiny, n=1, seed=5), 1, 1)
    b.close()
    assert getattr(tiny.model, "_cached_continuous_batching_manager", None) is None
