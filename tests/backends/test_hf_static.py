"""hf-static on the tiny CPU model: exact token counts, honest timestamps, measured KV."""

import pytest

from batchperf.backends import BackendUnavailable, backend_names, create_backend
from batchperf.backends.cell_run import run_cell
from batchperf.measure.kv import kv_bytes_per_token
from batchperf.measure.metrics import token_count_errors
from batchperf.workload.spec import LengthSpec, WorkloadSpec


@pytest.fixture(scope="module")
def backend(tiny_model):
    return create_backend("hf-static", tiny_model)


def test_every_request_generates_exactly_its_target(backend, tiny_model) -> None:
    w = WorkloadSpec(6, LengthSpec(12, 12), output_lens=(3, 5), num_warmup=1).build(tiny_model.vocab_size, 4096)
    trace = run_cell(backend, w, batch_size=4, concurrency=6)
    assert token_count_errors(trace) == []
    assert [r.output_len for r in trace.requests] == [3, 5, 3, 5, 3, 5]
    assert trace.warmup_excluded == 1 and len(trace.requests) == 6


def test_timestamps_are_ordered(backend, tiny_model) -> None:
    w = WorkloadSpec(5, LengthSpec.parse("4,9"), output_lens=(2, 4), seed=1).build(tiny_model.vocab_size, 4096)
    trace = run_cell(backend, w, batch_size=2, concurrency=3)
    for r in trace.requests:
        assert 0 <= r.arrival <= r.scheduled < r.token_times[0]
        assert list(r.token_times) == sorted(r.token_times)
    assert trace.end == max(r.token_times[-1] for r in trace.requests)


def test_a_request_released_during_a_batch_counts_the_rest_of_the_batch_in_its_ttft(backend, tiny_model) -> None:
    """Request 0 (2 tokens) frees its slot while request 1 (8 tokens) keeps the batch running: request 2 is
    released then, and its TTFT runs from that release, through the end of the batch, not from the end."""
    w = WorkloadSpec(4, LengthSpec(4, 4), output_lens=(2, 8)).build(tiny_model.vocab_size, 4096)
    trace = run_cell(backend, w, batch_size=2, concurrency=2)
    first, second, released = trace.requests[0], trace.requests[1], trace.requests[2]
    assert released.arrival == first.token_times[-1] < second.token_times[-1]
    assert released.send_delay == 0
    assert released.ttft > second.token_times[-1] - released.arrival


def test_concurrency_limits_what_a_batch_can_hold(backend, tiny_model) -> None:
    """With concurrency 2 and batch 8, no batch ever holds more than 2 requests."""
    w = WorkloadSpec(6, LengthSpec(4, 4), output_lens=(2,)).build(tiny_model.vocab_size, 4096)
    trace = run_cell(backend, w, batch_size=8, concurrency=2)
    starts = [r.scheduled for r in trace.requests]
    assert max(starts.count(s) for s in set(starts)) <= 2


def test_kv_bytes_are_measured_from_the_cache(backend, tiny_model) -> None:
    w = WorkloadSpec(2, LengthSpec(10, 10), output_lens=(3, 6)).build(tiny_model.vocab_size, 4096)
    trace = run_cell(backend, w, batch_size=2, concurrency=2)
    per_token = kv_bytes_per_token(tiny_model.config, tiny_model.dtype)
    for r in trace.requests:
        assert r.kv_tokens == 10 + 6 - 1  # padded to the batch's longest output; last token never fed back
        assert r.kv_bytes == per_token * r.kv_tokens


def test_unknown_backend_is_named(tiny_model) -> None:
    with pytest.raises(ValueError, match="unknown backend 'nope'.*hf-static"):
        create_backend("nope", tiny_model)
    assert "hf-static" in backend_names()


def test_backend_with_missing_dependency_is_unavailable(tiny_model) -> None:
    from batchperf.backends import register_backend

    register_backend("needs-missing", "batchperf_no_such_module:Backend")
    with pytest.raises(BackendUnavailable, match="not installed"):
        create_backend("needs-missing", tiny_model)


def test_a_request_released_into_a_slot_freed_mid_batch_is_sent_at_its_release_one_due_keeps_its_send() -> None:
    from batchperf.backends.hf_static import _Batches
    from batchperf.backends.sender import Sent
    from batchperf.measure.clock import RunClock
    from batchperf.workload.spec import RequestSpec

    batches = _Batches(None, 2, RunClock(None))
    # closed loop: its slot freed at 0.5 inside a batch that ended at 0.7, when this thread saw it
    batches.add(Sent(RequestSpec(0, (1,), 1, 0.0), arrival=0.5, sent=0.7))
    # open loop: due at 0.3, sent by the sender thread at 0.31 (its lag is its own, not erased)
    batches.add(Sent(RequestSpec(1, (1,), 1, 0.3), arrival=0.3, sent=0.31))
    assert [r.sent for r in batches.queue] == [0.5, 0.31]
