"""Small real workloads shared by the tests that run backends for real."""

from __future__ import annotations

from typing import Any

from batchperf.measure.workload import LengthSpec, Workload, WorkloadSpec


def small_workload(model: Any) -> Workload:
    """Six requests of 24 or 40 prompt tokens, 5 or 9 output tokens, one warm-up: a real run in seconds."""
    spec = WorkloadSpec(num_prompts=6, prompt_len=LengthSpec.parse("24,40"), output_lens=(5, 9), num_warmup=1)
    return spec.build(model.vocab_size, model.max_model_len)
