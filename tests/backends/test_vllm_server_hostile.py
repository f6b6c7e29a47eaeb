"""The vllm-server client against servers that misbehave (issue 26): one that accepts requests and never
answers (item 8: the request timeout is an option scaled to the cell's work, and a failed warm-up fails the cell
at once), and wrong-shaped SSE chunks and /v1/models answers (a failed request or probe with a message, never a
TypeError or AttributeError). The servers are tests/support/fake_openai_server.py."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from fake_openai_server import fake_server, models_answer, server_info

from batchperf.backends import create_backend
from batchperf.backends.cell_run import run_cell
from batchperf.backends.external_server import probe
from batchperf.backends.vllm_server import request_timeout
from batchperf.workload.spec import LengthSpec, WorkloadSpec

pytest.importorskip("aiohttp", reason="vllm-server's client needs aiohttp (the `vllm` extra)")

MODEL_DIR = "/models/tiny"


def backend_for(url: str, **options: Any) -> Any:
    model = SimpleNamespace(path=Path(MODEL_DIR), spec=SimpleNamespace(source="builtin:tiny-qwen2", dtype="float32"))
    return create_backend("vllm-server", model, server_url=f"2={url}", **options)  # type: ignore[arg-type]


def workload(warmup: int = 2, output: int = 8, prompts: int = 4) -> Any:
    return WorkloadSpec(num_prompts=prompts, num_warmup=warmup, prompt_len=LengthSpec.parse("8"),
                        output_lens=(output,)).build(100, 200_000)


def test_a_server_that_never_answers_fails_the_cell_at_its_warm_up(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BATCHPERF_SERVER_URL", raising=False)
    with fake_server(root=MODEL_DIR, info=server_info(2), hang=True) as server:
        backend = backend_for(server.url, request_timeout_s=0.3)
        with pytest.raises(RuntimeError) as exc:
            run_cell(backend, workload(warmup=2), 2, 2)
        posts = server.posts
    message = str(exc.value)
    assert "warm-up failed: 2 of 2 request(s)" in message and "the cell is not measured" in message
    assert "no answer within 0.3 s (--batchperf-request-timeout)" in message
    assert posts == 2  # the warm-up requests only: no measured round was sent


def test_a_round_without_warm_up_where_every_request_failed_stops_the_cell(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BATCHPERF_SERVER_URL", raising=False)
    with fake_server(root=MODEL_DIR, info=server_info(2), hang=True) as server:
        with pytest.raises(RuntimeError, match="every request of the round failed .4 of 4.: no answer within 0.3 s"):
            run_cell(backend_for(server.url, request_timeout_s=0.3), workload(warmup=0), 2, 2)


def test_the_default_request_timeout_scales_with_the_cells_work_within_bounds() -> None:
    small, long_out = workload(output=8), workload(output=2000)
    assert request_timeout(small, batch_size=2, concurrency=2) == 60.0  # the floor: a server's first answer
    assert request_timeout(long_out, 2, 2) > request_timeout(workload(output=200), 2, 2) > 60.0
    # requests queued behind a full batch wait for it: more in flight per slot, more time
    assert request_timeout(workload(output=200), 1, 4) > request_timeout(workload(output=200), 4, 4)
    assert request_timeout(workload(output=100_000), 1, 16) == 3600.0  # the ceiling


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf")])
def test_a_request_timeout_that_is_not_a_positive_number_is_refused(bad: float,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BATCHPERF_SERVER_URL", raising=False)
    with pytest.raises(ValueError, match="request timeout must be a finite number of seconds > 0"):
        backend_for("http://127.0.0.1:9", request_timeout_s=bad)


@pytest.mark.parametrize("data", [
    "[1, 2]",  # not an object
    '{"choices": "x"}',
    '{"choices": [5]}',
    '{"choices": [{"index": 0, "token_ids": 7}]}',
    '{"choices": [], "usage": "lots"}',
    '{"choices": [], "usage": {"completion_tokens": "x"}}',
])
def test_a_wrong_shaped_sse_chunk_fails_the_request_with_a_message(data: str,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BATCHPERF_SERVER_URL", raising=False)
    with fake_server(root=MODEL_DIR, info=server_info(2), sse=[data]) as server:
        trace = backend_for(server.url).run(workload(warmup=0, prompts=2), 2, 2)
    assert [r.error is not None and "unexpected SSE chunk" in r.error for r in trace.requests] == [True, True]


@pytest.mark.parametrize(("models", "info", "message"), [
    ([1, 2], None, "/v1/models answered a list, not an object with a 'data' list"),
    ({"data": "x"}, None, "/v1/models answered a dict, not an object with a 'data' list"),
    ({"data": [5]}, None, "/v1/models lists a model that is not an object"),
    ({"data": [{"object": "model"}]}, None, "/v1/models lists a model without an 'id'"),
    (models_answer(MODEL_DIR) | {"data": [{"id": "m", "root": MODEL_DIR, "max_model_len": "big"}]}, None,
     "max_model_len is 'big', not a whole number"),
    (None, {"vllm_config": {"scheduler_config": {"max_num_seqs": "x"}}}, "max_num_seqs is 'x', not a whole number"),
    (None, {"vllm_config": {"scheduler_config": [1]}}, "scheduler_config is a list, not an object"),
])
def test_a_wrong_shaped_models_or_server_info_answer_is_a_probe_error(models, info, message: str) -> None:
    with fake_server(root=MODEL_DIR, models=models, info=info) as server:
        with pytest.raises(RuntimeError) as exc:
            probe(server.url)
    assert str(exc.value).startswith(f"server {server.url}: ") and message in str(exc.value)
