"""Small real workloads shared by the tests that run backends for real."""

from __future__ import annotations

from typing import Any, NamedTuple

from batchperf.measure.trace import RunTrace
from batchperf.measure.workload import LengthSpec, Workload, WorkloadSpec


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
                  num_prompts: str = "4", output_lens: str = "3,5", workload: str = "synthetic", policy: str = "fcfs",
                  **options: Any) -> Any:
    """The record of one small real cell of ``backend`` on the CPU (one round, no warm-up), as the suite builds it;
    ``options`` go to the backend (a KV pool size, say); ``workload`` and ``policy`` as the matrix's entries."""
    from batchperf.backends import create_backend
    from batchperf.suite.cell import build_workload, cell_record, one_round
    from batchperf.suite.matrix import CellParams

    cell = CellParams("cpu", "cpu", "tiny-qwen2", backend, batch_size=batch_size, prompt_len=prompt_len,
                      concurrency=concurrency, num_prompts=num_prompts, rounds=1, warmup_rounds=0, arrival="closed",
                      output_lens=output_lens, workload=workload, policy=policy).resolve()
    runner = create_backend(backend, model, **options)
    try:
        offered = build_workload(cell, model)
        return cell_record(cell, model, [one_round(runner, cell, offered)], offered)
    finally:
        runner.close()
