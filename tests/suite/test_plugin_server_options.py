"""The plugin's server options (issue 26): a malformed --batchperf-server-url or --batchperf-request-timeout is a
usage error before any cell runs; a server that accepts requests and never answers fails its cells at their
warm-up, within the request timeout, not after (rounds + 2) × 600 s."""

from __future__ import annotations

import pytest
from fake_openai_server import fake_server, server_info

pytest.importorskip("aiohttp", reason="vllm-server's client needs aiohttp (the `vllm` extra)")

CELL = ("-m", "cpu", "--batchperf-backends=vllm-server", "--batchperf-batch-sizes=2", "--batchperf-prompt-lens=8",
        "--batchperf-concurrency=2", "--batchperf-num-prompts=2", "--batchperf-rounds=1", "-p", "no:cacheprovider")


@pytest.fixture(autouse=True)
def _no_leak(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BATCHPERF_SERVER_URL", raising=False)  # the inner session sets them; undone after
    monkeypatch.delenv("BATCHPERF_REQUEST_TIMEOUT", raising=False)


@pytest.mark.parametrize(("option", "message"), [
    ("--batchperf-server-url=http://127.0.0.1:abc", "--batchperf-server-url: server 'http://127.0.0.1:abc': the URL "
                                                    "is not a valid URL (Port could not be cast to integer value*"),
    ("--batchperf-server-url=2=http://[::1", "--batchperf-server-url: server '2=http://[::1': the URL is not a valid "
                                             "URL (Invalid IPv6 URL)*"),
    ("--batchperf-request-timeout=0", "--batchperf-request-timeout 0: must be a finite number of seconds > 0"),
    ("--batchperf-request-timeout=nan", "--batchperf-request-timeout nan: must be a finite number of seconds > 0"),
    ("--batchperf-request-timeout=soon", "--batchperf-request-timeout soon: must be a finite number of seconds > 0"),
])
def test_a_malformed_server_option_is_a_usage_error_before_any_cell(suite: pytest.Pytester, option: str,
                                                                     message: str) -> None:
    result = suite.runpytest(*CELL, option)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*ERROR: {message}"])
    assert "Traceback" not in result.stderr.str()


def test_a_server_that_never_answers_fails_the_cell_at_its_warm_up(suite: pytest.Pytester, tiny_model) -> None:
    with fake_server(root=str(tiny_model.path), info=server_info(2), hang=True) as server:
        result = suite.runpytest(*CELL, f"--batchperf-server-url={server.url}", "--batchperf-request-timeout=0.5",
                                 f"--batchperf-model-path=tiny-qwen2={tiny_model.path}")  # the folder it serves
        posts = server.posts
    result.assert_outcomes(failed=1, skipped=1)  # the cell; the KV-growth check has no cell to fit
    result.stdout.fnmatch_lines(["*vllm-server: warm-up failed: * request(s) (no answer within 0.5 s "
                                 "(--batchperf-request-timeout)); the cell is not measured*"])
    assert 1 <= posts <= 2  # the first warm-up round's warm-up requests only


def test_the_request_timeout_option_is_documented_in_help(suite: pytest.Pytester) -> None:
    suite.runpytest("--help").stdout.fnmatch_lines(["*--batchperf-request-timeout=SECONDS*"])
