"""Run one cell: warm-up requests first (discarded), then the measured requests."""

from __future__ import annotations

from batchperf.backends import Backend
from batchperf.trace import RunTrace
from batchperf.workload import Workload


def run_cell(backend: Backend, workload: Workload, batch_size: int, concurrency: int) -> RunTrace:
    """The measured trace of ``workload``; its warm-up requests run before and are dropped."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    if workload.warmup:
        backend.run(workload.warmup_only(), batch_size, concurrency)
    trace = backend.run(workload, batch_size, concurrency)
    trace.warmup_excluded = len(workload.warmup)
    return trace
