"""The ``vllm-server`` backend: availability rules, and a real server on the tiny model where vLLM is installed."""

from __future__ import annotations

import importlib.util

import pytest

from batchperf.backends import BackendUnavailable, create_backend
from batchperf.backends.external_server import ServerEntry
from batchperf.backends.server_process import _group_members
from batchperf.measure.metrics import compute_metrics

aiohttp = pytest.importorskip("aiohttp", reason="vllm-server's client needs aiohttp (the `vllm` extra)")


def test_unavailable_without_vllm_or_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BATCHPERF_SERVER_URL", raising=False)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a))
    with pytest.raises(BackendUnavailable, match="no server URL"):
        create_backend("vllm-server", model=None)  # type: ignore[arg-type]


def test_a_given_url_needs_no_local_vllm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BATCHPERF_SERVER_URL", "http://127.0.0.1:9/,8=http://127.0.0.1:10")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    backend = create_backend("vllm-server", model=None)  # type: ignore[arg-type]
    assert backend.given == [ServerEntry("http://127.0.0.1:9"), ServerEntry("http://127.0.0.1:10", 8)]
    backend.close()  # nothing of ours to stop


def test_a_bad_server_entry_is_an_error_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BATCHPERF_SERVER_URL", "eight=http://127.0.0.1:9")
    with pytest.raises(ValueError, match="server 'eight=http://127.0.0.1:9': the batch size before '='"):
        create_backend("vllm-server", model=None)  # type: ignore[arg-type]


@pytest.mark.slow
def test_real_server_counts_targets_sends_chunks_and_stops_cleanly(stream4_server_run) -> None:
    trace, pgid = stream4_server_run
    assert [r.error for r in trace.requests] == [None] * 6
    assert [r.output_len for r in trace.requests] == [r.target_len for r in trace.requests]
    assert all(r.arrival <= r.sent < r.token_times[0] for r in trace.requests)
    # at --stream-interval 4 vLLM streams the first token at once, then every 4 tokens, and the rest last
    assert {r.chunk_sizes for r in trace.requests} == {(1, 4), (1, 4, 4)}
    m = compute_metrics(trace)
    assert m["n_itl"] == sum(len(r.chunk_sizes) - 1 for r in trace.requests)
    assert m["median_itl_ms"] > 0  # a chunk is one ITL sample, not k - 1 zero gaps
    assert _group_members(pgid) == [], "the server or its engine-core child outlived close()"
