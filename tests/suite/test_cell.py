"""suite.cell: the record of a cell built from its measured rounds, and a cell's test failing on its token counts."""

from __future__ import annotations

import json

import pytest
from gate_samples import cell_info, results_file
from paths import REPO

from batchperf.measure.trace import RequestTrace, RunTrace
from batchperf.suite.cell import cell_record
from batchperf.suite.matrix import CellParams


def one_round(tokens_of_request_0: int) -> RunTrace:
    requests = [RequestTrace(i, 16, 2, 0.0, 0.0, tuple(0.1 * (k + 1) for k in range(n)), kv_tokens=17,
                             kv_bytes=17 * 2048, sent=0.0, chunk_sizes=(1,) * n)
                for i, n in enumerate((tokens_of_request_0, 2))]
    return RunTrace("fake", 2, 2, requests, end=0.2)


def test_token_counts_are_checked_in_every_round(tiny_model) -> None:
    cell = CellParams("cpu", "cpu", "tiny-qwen2", "fake", batch_size="2", prompt_len="16", concurrency="2",
                      num_prompts="2", rounds=2, warmup_rounds=0, arrival="closed", output_lens="2").resolve()
    record = cell_record(cell, tiny_model, [one_round(1), one_round(2)])  # only the first round is short
    assert record.token_count_errors == ["round 1: request 0: generated 1 tokens, target 2"]


def test_a_backends_engine_settings_are_the_records_engine_section(tiny_model) -> None:
    class Backend:  # a backend that says what moves its speed, as vllm and vllm-server do
        name = "fake"

        def engine_settings(self, batch_size: int) -> dict[str, object]:
            return {"env": {"VLLM_CPU_KVCACHE_SPACE": "1"}, "args": {"max_num_seqs_seen": batch_size}}

    cell = CellParams("cpu", "cpu", "tiny-qwen2", "fake", batch_size="2", prompt_len="16", concurrency="2",
                      num_prompts="2", rounds=1, warmup_rounds=0, arrival="closed", output_lens="2").resolve()
    record = cell_record(cell, tiny_model, [one_round(2)], backend=Backend())  # type: ignore[arg-type]
    assert record.engine == {"env": {"VLLM_CPU_KVCACHE_SPACE": "1"}, "args": {"max_num_seqs_seen": 2}}
    assert cell_record(cell, tiny_model, [one_round(2)]).engine == {}


# The suite's backend with request 0 of every run one token short
SHORT_BACKEND = '''
import dataclasses

import pytest


class OneShort:
    def __init__(self, real):
        self.real = real

    def __getattr__(self, name):
        return getattr(self.real, name)

    def run(self, workload, batch_size, concurrency):
        trace = self.real.run(workload, batch_size, concurrency)
        first = trace.requests[0]
        trace.requests[0] = dataclasses.replace(first, token_times=first.token_times[:-1], chunk_sizes=None)
        return trace


@pytest.fixture
def batchperf_backend(batchperf_backend):
    return OneShort(batchperf_backend)
'''


def test_a_cell_short_of_tokens_fails_as_such_and_its_record_is_still_stored(suite: pytest.Pytester) -> None:
    suite.makeconftest((REPO / "conftest.py").read_text() + SHORT_BACKEND)
    results = suite.path / "out.json"
    other = results_file(suite.path / "other.json", [cell_info()])  # with the gate on, a cell it would compare
    result = suite.runpytest("-m", "cpu", "--batchperf-backends=hf-static", "--batchperf-batch-sizes=2",
                             "--batchperf-prompt-lens=8", "--batchperf-concurrency=2", "--batchperf-num-prompts=3",
                             "--batchperf-rounds=1", "--batchperf-output-lens=2,3", "-p", "no:cacheprovider",
                             f"--benchmark-json={results}", f"--benchmark-compare={other}")
    result.assert_outcomes(failed=1, skipped=1)  # the cell; one prompt length: no KV slope to fit
    result.stdout.fnmatch_lines(["E       AssertionError: 1 request(s) did not produce their target token count:",
                                 "E         round 1: request 0: generated 1 tokens, target 2",
                                 "E       assert not ['round 1: request 0: generated 1 tokens, target 2']",
                                 "test_cells.py:*: AssertionError"])
    (bench,) = json.loads(results.read_text())["benchmarks"]
    info = bench["extra_info"]
    assert info["token_count_errors"] == ["round 1: request 0: generated 1 tokens, target 2"]
    assert "gate" not in info  # a cell that miscounts is never compared with a baseline
    result.stdout.fnmatch_lines(["compared with *other.json: no cell checked"])
