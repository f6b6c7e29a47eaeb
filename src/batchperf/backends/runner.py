"""Run one cell: warm-up requests first (discarded; a failed one fails the cell), then the measured requests."""

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
    if workload.warmup:  # a warm-up that fails (a server that never answers) fails the cell now, not rounds later
        warm = backend.run(workload.warmup_only(), batch_size, concurrency)
        if failed := [r for r in warm.requests if r.error is not None]:
            raise RuntimeError(f"{backend.name}: warm-up failed: {len(failed)} of {len(warm.requests)} request(s) "
                               f"({failed[0].error}); the cell is not measured")
    if sampler is None:
        trace = backend.run(workload, batch_size, concurrency)
    else:
        with sampler:
            trace = backend.run(workload, batch_size, concurrency)
        trace.telemetry = sampler.summary(output_tokens=sum(r.output_len for r in trace.requests if r.error is None))
    if trace.requests and all(r.error is not None for r in trace.requests):  # nothing to measure, in any round
        raise RuntimeError(f"{backend.name}: every request of the round failed ({len(trace.requests)} of "
                           f"{len(trace.requests)}): {trace.requests[0].error}; the cell is not measured")
    trace.warmup_excluded = len(workload.warmup)
    return trace
