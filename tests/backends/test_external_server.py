"""A server the suite did not start: which cells it runs, and the skip message for those it does not.

The servers here are the tests' fake vLLM server (tests/support/fake_openai_server.py), answering
``/v1/models`` (and ``/server_info`` in vLLM's development mode) with what vLLM 0.32 answers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import fake_openai_server
import pytest
from fake_openai_server import server_info

from batchperf.backends import CellUnsupported, create_backend
from batchperf.backends.external_server import ServerEntry, parse_entries, probe
from batchperf.workload.spec import LengthSpec, WorkloadSpec

pytest.importorskip("aiohttp", reason="vllm-server's client needs aiohttp (the `vllm` extra)")

MODEL_DIR = "/models/tiny"
models_answer = partial(fake_openai_server.models_answer, root=MODEL_DIR)


@pytest.fixture
def fake_server() -> Iterator[Callable[..., str]]:
    """Start fake servers: ``fake_server(models=…, info=…)`` returns the URL; ``info=None`` is a server
    outside development mode (``/server_info`` is 404)."""
    with ExitStack() as servers:
        def start(models: dict[str, Any] | None = None, info: dict[str, Any] | None = None) -> str:
            serve = fake_openai_server.fake_server(root=MODEL_DIR, models=models, info=info)
            return servers.enter_context(serve).url

        yield start


def backend_for(urls: str, path: str = MODEL_DIR, dtype: str = "float32") -> Any:
    model = SimpleNamespace(path=Path(path), spec=SimpleNamespace(source="builtin:tiny-qwen2", dtype=dtype))
    return create_backend("vllm-server", model, server_url=urls)  # type: ignore[arg-type]


def workload(prompt: int = 64) -> Any:
    return WorkloadSpec(num_prompts=2, prompt_len=LengthSpec.parse(str(prompt)), output_lens=(32,)).build(100, 8192)


def test_entries_parse_a_url_or_a_batch_size_and_a_url() -> None:
    assert parse_entries("http://h:1/, 8=http://h:2") == [ServerEntry("http://h:1"), ServerEntry("http://h:2", 8)]
    assert ServerEntry.parse("http://h:1/v?a=b") == ServerEntry("http://h:1/v?a=b")
    for bad in ("h:1", "x=http://h:1", "0=http://h:1", "8=h:1"):
        with pytest.raises(ValueError, match="BATCH_SIZE=URL|batch size before"):
            ServerEntry.parse(bad)


def test_probe_reads_models_and_the_dev_mode_config(fake_server: Any) -> None:
    served = probe(fake_server(info=server_info(4)))
    assert (served.model_id, served.root, served.max_model_len) == ("served-name", MODEL_DIR, 4096)
    assert (served.max_num_seqs, served.dtype) == (4, "float32")
    plain = probe(fake_server())
    assert plain.max_num_seqs is None and plain.dtype is None
    with pytest.raises(RuntimeError, match="GET /v1/models failed"):
        probe("http://127.0.0.1:9")


def test_each_batch_size_goes_to_the_server_that_runs_it(fake_server: Any) -> None:
    four, eight = fake_server(info=server_info(4)), fake_server()
    backend = backend_for(f"{four},8={eight}")
    assert backend.given_server(workload(), 4).url == four  # read from the server
    assert backend.given_server(workload(), 8).url == eight  # given by the user
    with pytest.raises(CellUnsupported, match=rf"no given server runs batch size 1 \({four} runs batch size 4; "
                                              rf"{eight} runs batch size 8\)"):
        backend.given_server(workload(), 1)


def test_a_server_that_does_not_say_its_batch_size_needs_it_given(fake_server: Any) -> None:
    url = fake_server()
    with pytest.raises(CellUnsupported, match=rf"does not publish its max_num_seqs .*VLLM_SERVER_DEV_MODE=1.*"
                                              rf"--batchperf-server-url BATCH_SIZE={url}"):
        backend_for(url).given_server(workload(), 4)


def test_a_batch_size_the_server_contradicts_is_refused(fake_server: Any) -> None:
    url = fake_server(info=server_info(4))
    with pytest.raises(CellUnsupported, match="given as batch size 8 but runs max_num_seqs=4"):
        backend_for(f"8={url}").given_server(workload(), 8)


@pytest.mark.parametrize(("answers", "model", "message"), [
    ({"models": models_answer(root="/models/other")}, {}, "serves '/models/other'; the cell's model is '/models/tiny'"),
    ({"info": server_info(4, dtype="torch.bfloat16")}, {}, "runs the model in bfloat16; the cell's dtype is float32"),
    ({"models": models_answer(max_model_len=64)}, {}, "has max_model_len 64; the cell's longest request needs 96"),
])
def test_a_server_of_another_model_skips_the_cell_naming_the_difference(fake_server: Any, answers: dict[str, Any],
                                                                        model: dict[str, str], message: str) -> None:
    url = fake_server(**answers)
    with pytest.raises(CellUnsupported, match=message):
        backend_for(f"4={url}", **model).given_server(workload(), 4)


def test_the_same_folder_by_another_path_is_the_same_model(fake_server: Any, tmp_path: Path) -> None:
    (tmp_path / "tiny").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "tiny")
    url = fake_server(models=models_answer(root=str(tmp_path / "link")))
    assert backend_for(f"4={url}", path=str(tmp_path / "tiny")).given_server(workload(), 4).url == url


def test_a_mismatched_server_skips_its_cells_in_the_suite(suite: pytest.Pytester, fake_server: Any,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BATCHPERF_SERVER_URL", raising=False)  # the inner session sets it; undone after
    url = fake_server(models=models_answer(root="/models/something-else"), info=server_info(2))
    result = suite.runpytest("-m", "cpu", "--batchperf-backends=vllm-server", "--batchperf-batch-sizes=2,4",
                             "--batchperf-prompt-lens=8", "--batchperf-concurrency=2", "--batchperf-num-prompts=2",
                             "--batchperf-rounds=1", f"--batchperf-server-url={url}", "-rs", "-p", "no:cacheprovider")
    result.assert_outcomes(skipped=3)  # both cells, then the KV-growth check with no cell to fit
    result.stdout.fnmatch_lines([
        f"*SKIPPED*cell cpu-tiny-qwen2-vllm-server-bs2-p8-c2: backend 'vllm-server' cannot run it: "
        f"server {url} serves '/models/something-else'; the cell's model is*",
        f"*SKIPPED*cell cpu-tiny-qwen2-vllm-server-bs4-p8-c2: backend 'vllm-server' cannot run it: "
        f"no given server runs batch size 4 ({url} runs batch size 2)",
    ])
