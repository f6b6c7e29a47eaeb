"""The ``continuous`` backend end to end on the tiny model: tokens, timestamps, measured KV."""

from __future__ import annotations

import pytest

from batchperf.backends import create_backend
from batchperf.backends.cell_run import run_cell
from batchperf.backends.continuous import ContinuousBackend
from batchperf.engine.block_manager import blocks_for
from batchperf.launch.environ import INJECT_DELAY_MS_ENV
from batchperf.measure.kv import kv_bytes_per_request, kv_bytes_per_token, kv_tokens_held
from batchperf.measure.metrics import compute_metrics, token_count_errors
from batchperf.workload.spec import Arrival, LengthSpec, WorkloadSpec


def workload(tiny_model, prompt: str = "8,20,33", num_prompts: int = 6, arrival: Arrival = Arrival()):
    spec = WorkloadSpec(num_prompts=num_prompts, prompt_len=LengthSpec.parse(prompt), output_lens=(3, 6),
                        arrival=arrival, num_warmup=1)
    return spec.build(tiny_model.vocab_size, tiny_model.max_model_len, first_token_id=1)


@pytest.mark.parametrize(("batch_size", "concurrency"), [(2, 4), (4, 2)])
def test_every_request_gets_its_target_with_ordered_timestamps(tiny_model, batch_size, concurrency):
    backend = create_backend("continuous", tiny_model)
    assert isinstance(backend, ContinuousBackend)
    trace = run_cell(backend, workload(tiny_model), batch_size, concurrency)
    assert token_count_errors(trace) == []
    assert [r.request_id for r in trace.requests] == list(range(6)) and trace.warmup_excluded == 1
    for request in trace.requests:
        assert request.arrival <= request.scheduled < request.token_times[0]
        assert list(request.token_times) == sorted(request.token_times)
    assert trace.end == max(r.finished for r in trace.requests)
    metrics = compute_metrics(trace)
    assert metrics["completed"] == 6 and metrics["total_output_tokens"] == sum(r.target_len for r in trace.requests)


def test_measured_kv_equals_the_analytic_value_up_to_whole_blocks(tiny_model):
    """kv_bytes is the blocks a request held at its peak: the analytic bytes of the tokens it held
    (prompt + output - 1: the last token is never fed back), rounded up to whole blocks."""
    backend = ContinuousBackend(tiny_model, block_size=16)
    trace = backend.run(workload(tiny_model), batch_size=3, concurrency=3)
    per_token = kv_bytes_per_token(tiny_model.config, tiny_model.dtype)
    assert trace.kv["bytes_per_block"] == 16 * per_token
    for request in trace.requests:
        held = kv_tokens_held(request.prompt_len, request.target_len)
        analytic = kv_bytes_per_request(tiny_model.config, tiny_model.dtype, request.prompt_len, request.target_len) - per_token
        assert request.kv_tokens == held
        assert request.kv_bytes == blocks_for(held, 16) * trace.kv["bytes_per_block"]
        assert 0 <= request.kv_bytes - analytic < trace.kv["bytes_per_block"]
    assert trace.kv["pool_bytes"] == trace.kv["num_blocks"] * trace.kv["bytes_per_block"]
    assert 0 < trace.kv["kv_cache_peak_bytes"] <= trace.kv["pool_bytes"]
    assert trace.kv["preemptions"] == 0  # the default pool holds batch_size of the longest requests


def test_block_size_one_measures_exactly_the_analytic_bytes(tiny_model):
    trace = ContinuousBackend(tiny_model, block_size=1).run(workload(tiny_model, prompt="12"), batch_size=2, concurrency=2)
    per_token = kv_bytes_per_token(tiny_model.config, tiny_model.dtype)
    for request in trace.requests:
        assert request.kv_bytes == per_token * kv_tokens_held(request.prompt_len, request.target_len)


def test_a_small_pool_preempts_and_still_completes(tiny_model):
    # prompt chunks of 16 let a second request in before the first has all its blocks; 2 spare blocks can't hold both
    backend = ContinuousBackend(tiny_model, block_size=4, num_blocks=blocks_for(kv_tokens_held(30, 6), 4) + 2,
                                max_step_tokens=16)
    trace = backend.run(workload(tiny_model, prompt="30", arrival=Arrival("burst")), batch_size=4, concurrency=4)
    assert token_count_errors(trace) == []
    assert trace.kv["preemptions"] > 0


def test_a_pool_too_small_for_one_request_says_so(tiny_model):
    backend = ContinuousBackend(tiny_model, block_size=4, num_blocks=2)
    with pytest.raises(ValueError, match="KV blocks"):
        backend.run(workload(tiny_model), batch_size=2, concurrency=2)


@pytest.mark.parametrize(("kwargs", "message"), [({"block_size": 0}, "block_size"), ({"num_blocks": 0}, "num_blocks")])
def test_bad_settings_are_refused(tiny_model, kwargs, message):
    with pytest.raises(ValueError, match=message):
        ContinuousBackend(tiny_model, **kwargs)


def test_the_slowdown_hook_slows_the_runners_own_forward(tiny_model, monkeypatch):
    """BATCHPERF_INJECT_*: the runner runs the weights through its own forward, which the module's hook never sees;
    every step's forward must still wait (ci/gate_check.sh and `ab`'s detector rely on the hook). Counted, not timed."""
    from batchperf.backends import inject

    sleeps: list[float] = []
    monkeypatch.setattr(inject, "wait", sleeps.append)
    monkeypatch.setenv(INJECT_DELAY_MS_ENV, "7")
    backend = ContinuousBackend(tiny_model)
    workload = WorkloadSpec(num_prompts=3, prompt_len=LengthSpec.parse("8"), output_lens=(4,)).build(
        tiny_model.vocab_size, tiny_model.max_model_len)
    run_cell(backend, workload, batch_size=2, concurrency=2)
    assert len(sleeps) >= 4 and set(sleeps) >= {0.007} and all(s >= 0.007 for s in sleeps)  # one per step, at least
    monkeypatch.delenv(INJECT_DELAY_MS_ENV)
    unhooked = ContinuousBackend(tiny_model)
    sleeps.clear()
    run_cell(unhooked, workload, batch_size=2, concurrency=2)
    assert sleeps == []
