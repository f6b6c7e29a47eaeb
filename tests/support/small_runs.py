"""Small real workloads shared by the tests that run backends for real."""

from __future__ import annotations

from typing import Any, NamedTuple

from paths import REPO

from batchperf.measure.trace import RunTrace
from batchperf.workload.spec import LengthSpec, Workload, WorkloadSpec


def small_workload(model: Any) -> Workload:
    """Six requests of 24 or 40 prompt tokens, 5 or 9 output tokens, one warm-up: a real run in seconds."""
    spec = WorkloadSpec(num_prompts=6, prompt_len=LengthSpec.parse("24,40"), output_lens=(5, 9), num_warmup=1)
    return spec.build(model.vocab_size, model.max_model_len)


def dummy_of(model, folder):
    """``model``'s architecture from a folder holding its config.json and nothing else, on dummy weights."""
    import shutil
    from dataclasses import replace

    from batchperf.backends.dummy import build_dummy

    shutil.copy(model.path / "config.json", folder / "config.json")
    return build_dummy(replace(model.spec, name=f"{model.name}-dummy", weights="dummy"), folder)


class ServerRun(NamedTuple):
    """A real vllm-server run (tests/conftest.py ``stream4_server_run``) and what the tests check of it."""

    trace: RunTrace
    pgid: int  # the server's process group, stopped by the time the run is returned
    argv: list[str]  # how the server was started
    model: Any  # the config-only model it served
    refused: list[Any]  # the addresses this process was refused while it ran (tests/support/no_hub.py)


def measured_cell(model: Any, backend: str, batch_size: str = "2", prompt_len: str = "16", concurrency: str = "2",
                  num_prompts: str = "4", output_lens: str = "3,5", workload: str | None = None,
                  policy: str = "fcfs", **options: Any) -> Any:
    """The record of one small real cell of ``backend`` on the CPU (one round, no warm-up), as the suite builds it;
    ``workload``: a --batchperf-workloads entry (then the record has the ``workload`` section, the backend's
    treatment of priorities and prefixes); ``policy`` a --batchperf-policies entry; ``options`` go to the backend
    (a KV pool size, say)."""
    from batchperf.backends import create_backend
    from batchperf.suite.cell import build_workload, cell_record, one_round
    from batchperf.suite.matrix import CellParams

    cell = CellParams("cpu", "cpu", "tiny-qwen2", backend, batch_size=batch_size, prompt_len=prompt_len,
                      concurrency=concurrency, num_prompts=num_prompts, rounds=1, warmup_rounds=0, arrival="closed",
                      output_lens=output_lens, workload=workload or "synthetic", policy=policy).resolve()
    runner = create_backend(backend, model, **options)
    try:
        offered = build_workload(cell, model)
        return cell_record(cell, model, [one_round(runner, cell, offered)], offered,
                           None if workload is None else runner)
    finally:
        runner.close()


# the CPU tier's traffic fixtures (tools/make_example_trace.py)
TWO_TENANTS = f"tenants:{REPO / 'fixtures/traffic/two_tenants.toml'}"  # interactive 12 requests, batch 4
MINI_TRACE = f"trace:{REPO / 'fixtures/traffic/mini_trace.jsonl'}"  # 12 requests, interactive 8, batch 4


def check_serves_every_kind_ignoring_priority(record: Any, kind: str, backend: str) -> None:
    """A backend without a scheduler or prefix cache ran a workload of ``kind`` in full: every offered request
    completed with its target tokens, its tenants counted apart, priority said to be ignored (not a failure)."""
    section = record.workload
    assert section["kind"] == kind and section["priority"] == "ignored", section
    assert backend in section["priority_note"] or "priority" in section["priority_note"]
    assert section["prefix_caching"] is None and "prefix_cache_hit_rate" not in record.counters
    assert record.token_count_errors == []
    assert record.slo["offered"] == record.metrics["completed"] > 0 and record.metrics["failed"] == 0
    requests = record.run_traces()[0].requests
    assert all(r.error is None and r.output_len == r.target_len for r in requests)
    if kind == "prefix":
        assert section["expected_prefix_hit_rate"] > 0 and section["open_loop"] is False
    else:  # tenants and the trace: open loop, two tenants counted apart, every request's priority carried
        assert section["open_loop"] is True and record.metrics["n_send_lag"] == len(requests)
        assert set(record.tenants) == {"interactive", "batch"} == set(section["tenants"])
        assert sum(t["offered"] for t in record.tenants.values()) == record.slo["offered"]
        assert {(r.tenant, r.priority) for r in requests} == {("interactive", 0), ("batch", 1)}
