"""suite.cell: the record of a cell built from its measured rounds."""

from __future__ import annotations

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
