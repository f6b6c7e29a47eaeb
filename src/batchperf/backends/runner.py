"""Run one cell: warm-up requests first (discarded), then the measured requests."""

from __future__ import annotations

from typing import TYPE_CHECKING

from batchperf.backends import Backend
from batchperf.measure.trace import RunTrace
from batchperf.measure.workload import Workload

if TYPE_CHECKING:
    from batchperf.measure.telemetry import Sampler


def run_cell(backend: Backend, workload: Workload, batch_size: int, concurrency: int,
             sampler: Sampler | None = None) -> RunTrace:
    """The measured trace of ``workload``; its warm-up requests run before and are dropped.

    A ``sampler`` watches the measured run only (not the warm-up); its summary lands in ``trace.telemetry``.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    if workload.warmup:
        backend.run(workload.warmup_only(), batch_size, concurrency)
    if sampler is None:
        trace = backend.run(workload, batch_size, concurrency)
    else:
        with sampler:
            trace = backend.run(workload, batch_size, concurrency)
        trace.telemetry = sampler.summary(output_tokens=sum(r.output_len for r in trace.requests if r.error is None))
    trace.warmup_excluded = len(workload.warmup)
    return trace
