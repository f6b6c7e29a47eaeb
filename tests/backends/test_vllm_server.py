"""The ``vllm-server`` backend: availability rules, and a real server on the tiny model where vLLM is installed."""

from __future__ import annotations

import importlib.util

import pytest
from fake_openai_server import fake_server, server_info
from rule_producers import rule_gaps, uncatalogued

from batchperf.backends import BackendUnavailable, create_backend
from batchperf.backends.external_server import ServerEntry
from batchperf.launch.server_process import _group_members
from batchperf.measure.counters import ABSENT, COUNTERS
from batchperf.measure.metrics import compute_metrics
from batchperf.workload.spec import LengthSpec, WorkloadSpec

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


def test_the_servers_speed_settings_are_recorded(monkeypatch: pytest.MonkeyPatch, tiny_model) -> None:
    monkeypatch.delenv("BATCHPERF_SERVER_URL", raising=False)
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "0")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object())  # as if vLLM were installed
    backend = create_backend("vllm-server", model=tiny_model, server_args=("--max-num-batched-tokens", "512"))
    settings = backend.engine_settings(4)
    assert settings["env"]["VLLM_CPU_OMP_THREADS_BIND"] == "0"
    assert settings["env"]["VLLM_CPU_KVCACHE_SPACE"] == "1"  # the server's default, as it starts it
    assert settings["args"] == {"max_num_batched_tokens": None, "server_args": ["--max-num-batched-tokens", "512"]}
    monkeypatch.setenv("BATCHPERF_SERVER_URL", "http://127.0.0.1:9/")
    given = create_backend("vllm-server", model=tiny_model)
    assert given.engine_settings(4) == {"server": "given: its settings are its own, not known to batchperf"}


def test_a_kept_server_is_named_as_a_process_outside_this_ones_tree(monkeypatch: pytest.MonkeyPatch, tmp_path,
                                                                    tiny_model) -> None:
    """Under --keep-servers the server is used, not started, by most processes: the backend names its guard's pid,
    so that the round's CPU time counts it (batchperf.backends.cell_run.outside_processes); nothing without one."""
    import os

    from batchperf.backends import vllm_server
    from batchperf.launch.kept_server import KeptServer

    monkeypatch.delenv("BATCHPERF_SERVER_URL", raising=False)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object())  # as if vLLM were installed
    monkeypatch.setenv("BATCHPERF_KEEP_SERVERS", str(tmp_path))
    monkeypatch.setenv("BATCHPERF_KEEP_SERVERS_OWNER", str(os.getpid()))
    asked = []
    monkeypatch.setattr(vllm_server, "reuse_or_start", lambda keep, name, command, timeout_s: asked.append(name) or
                        KeptServer("http://127.0.0.1:9/health", 4242))
    backend = create_backend("vllm-server", model=tiny_model)
    assert backend.outside_processes() == ()  # no server found yet
    assert backend.base_url(4) == "http://127.0.0.1:9" and asked == ["vllm-server-bs4"]
    assert backend.outside_processes() == (4242,)
    backend.close()
    assert backend.outside_processes() == ()


def test_a_server_does_not_inherit_the_in_process_engines_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    """An in-process ``vllm`` cell earlier in the run set VLLM_ENABLE_V1_MULTIPROCESSING=0 here; the server the
    suite starts later runs its engine core in its own process, as users run it, unless the user set it."""
    from batchperf.backends import _vllm
    from batchperf.backends.vllm_server import server_env

    monkeypatch.setattr(_vllm, "SET_HERE", {"VLLM_ENABLE_V1_MULTIPROCESSING"})
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # as import_vllm set it
    assert "VLLM_ENABLE_V1_MULTIPROCESSING" not in server_env()
    monkeypatch.setattr(_vllm, "SET_HERE", set())  # the user's own choice
    assert server_env()["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"


def test_a_server_loads_its_compile_cache_without_aot_unless_the_user_chose(monkeypatch: pytest.MonkeyPatch) -> None:
    """vllm-cpu 0.32.0's AOT compile cache fails to load and recompiles at every start: the suite's servers start
    with VLLM_USE_AOT_COMPILE=0, and the KV pool bounded, as the in-process engine; a user's own value wins."""
    from batchperf.backends import _vllm
    from batchperf.backends.vllm_server import server_env

    monkeypatch.setattr(_vllm, "SET_HERE", set())
    monkeypatch.delenv("VLLM_USE_AOT_COMPILE", raising=False)
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    env = server_env()
    assert (env["VLLM_USE_AOT_COMPILE"], env["VLLM_CPU_KVCACHE_SPACE"]) == ("0", "1")
    monkeypatch.setenv("VLLM_USE_AOT_COMPILE", "1")
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "4")
    env = server_env()
    assert (env["VLLM_USE_AOT_COMPILE"], env["VLLM_CPU_KVCACHE_SPACE"]) == ("1", "4")
    assert _vllm.ENV_DEFAULTS["VLLM_USE_AOT_COMPILE"] == "0"  # the in-process engine's default too
    assert "VLLM_USE_AOT_COMPILE" not in _vllm.SPEED_ENV  # it changes the start, not the compiled graph


@pytest.mark.slow
def test_real_server_counts_targets_sends_chunks_and_stops_cleanly(stream4_server_run) -> None:
    trace = stream4_server_run.trace
    assert [r.error for r in trace.requests] == [None] * 6
    assert [r.output_len for r in trace.requests] == [r.target_len for r in trace.requests]
    assert all(r.arrival <= r.sent < r.token_times[0] for r in trace.requests)
    # at --stream-interval 4 vLLM streams the first token at once, then every 4 tokens, and the rest last:
    # (1, 4) and (1, 4, 4) here; a client that lags may get two of them merged into one chunk
    assert all(sum(r.chunk_sizes) == r.output_len and max(r.chunk_sizes) >= 4 for r in trace.requests)
    m = compute_metrics(trace)
    assert m["n_itl"] == sum(len(r.chunk_sizes) - 1 for r in trace.requests)
    assert m["median_itl_ms"] > 0  # a chunk is one ITL sample, not k - 1 zero gaps
    assert _group_members(stream4_server_run.pgid) == [], "the server or its engine-core child outlived close()"


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
def test_real_server_on_a_config_folder_reports_its_counters(stream4_server_run) -> None:
    """On a config folder alone (dummy weights, no tokenizer: the GPU tier's way; the CPU tier's own vllm-server
    cells cover a checkpoint with its tokenizer): vllm serve --load-format dummy --skip-tokenizer-init takes
    token-id prompts and streams token ids, and its own counters account for the run."""
    from batchperf.suite.cell import cell_record
    from batchperf.suite.matrix import CellParams

    trace, argv, model = stream4_server_run.trace, stream4_server_run.argv, stream4_server_run.model
    assert argv[argv.index("--model") + 1] == str(model.path) and "--skip-tokenizer-init" in argv
    assert argv[argv.index("--load-format") + 1] == "dummy"
    assert stream4_server_run.refused == []  # this process; the server's ran with HF_HUB_OFFLINE=1
    # the server's own counters, before and after this run: vLLM's iteration tokens are the prompt
    # tokens computed plus the tokens generated (prefix caching is off: every prompt token is computed)
    counters = trace.counters
    assert counters["iteration_tokens_total"] == sum(r.prompt_len + r.output_len for r in trace.requests)
    assert counters["finished_requests"] == 6 and counters["num_preemptions"] == 0
    assert 0 < counters["engine_steps"] <= sum(r.output_len for r in trace.requests)
    assert 0 < counters["prefill_time_seconds_sum"] and 0 < counters["decode_time_seconds_sum"]
    assert counters["num_requests_running"] <= 2, "--max-num-seqs is the batch size"
    cell = CellParams("cpu", "cpu", "tiny-qwen2", "vllm-server", batch_size="2", prompt_len="24,40",
                      concurrency="3", num_prompts="6", rounds=1, warmup_rounds=0, arrival="closed").resolve()
    record = cell_record(cell, model, [trace])
    assert rule_gaps(record) == ([], []) and uncatalogued(record) == []


def test_a_requests_priority_and_tenant_travel_as_vllm_accepts_them(tiny_model) -> None:
    """vLLM's OpenAI server takes ``priority`` in the completion body (lower first) and refuses any but 0 on its
    default fcfs policy, so it is sent only when set; the trace keeps the tenant, priority and due time."""
    from batchperf.workload.spec import LengthSpec, RequestSpec, Workload, WorkloadSpec

    spec = WorkloadSpec(3, LengthSpec(4, 4), output_lens=(2,))
    requests = tuple(RequestSpec(i, (1, 2, 3, 4), 2, 0.01 * i, tenant=("chat", "batch")[i % 2], priority=i % 2)
                     for i in range(3))
    with fake_server(metrics=None, root=str(tiny_model.path)) as server:
        backend = create_backend("vllm-server", tiny_model, server_url=f"2={server.url}")
        trace = backend.run(Workload(spec, requests, unlimited=True), 2, 2)
    assert sorted(p.get("priority") for p in server.payloads if "priority" in p) == [1]
    assert sum("priority" not in p for p in server.payloads) == 2
    assert [(r.tenant, r.priority, r.due) for r in trace.requests] == [("chat", 0, 0.0), ("batch", 1, 0.01),
                                                                       ("chat", 0, 0.02)]


def test_a_shared_prefix_workload_empties_the_servers_prefix_cache_before_each_run(tiny_model) -> None:
    """Every round sends the same prompts: a warm cache would count round 1's prompts as round 2's hits. The cache
    is emptied (POST /reset_prefix_cache); a server without that development route fails the cell, saying how."""
    from batchperf.workload.spec import LengthSpec, WorkloadSpec
    from batchperf.workload.traffic import parse_workload

    workload = parse_workload("prefix:2:8", WorkloadSpec(4, LengthSpec(4, 4), output_lens=(2,))).build(100, 64)
    with fake_server(metrics=None, root=str(tiny_model.path), info=server_info(2)) as server:
        backend = create_backend("vllm-server", tiny_model, server_url=f"2={server.url}")
        backend.run(workload, 2, 2)
        backend.run(workload, 2, 2)
        assert server.resets == 2
    with fake_server(metrics=None, root=str(tiny_model.path)) as server:
        backend = create_backend("vllm-server", tiny_model, server_url=f"2={server.url}")
        with pytest.raises(RuntimeError, match="could not empty its prefix cache.*VLLM_SERVER_DEV_MODE=1"):
            backend.run(workload, 2, 2)
