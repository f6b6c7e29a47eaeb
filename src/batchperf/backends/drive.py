"""What every backend does at the end of a run: its requests' traces, in order, as one RunTrace."""

from __future__ import annotations

from typing import Any

from batchperf.measure.trace import RequestTrace, RunTrace


def run_trace(backend: str, batch_size: int, concurrency: int, done: list[RequestTrace],
              kv: dict[str, Any], memory: dict[str, float] | None = None) -> RunTrace:
    """The run's trace; it ends when its last request finished."""
    if not done:
        raise RuntimeError(f"{backend}: the run completed no request; nothing to measure")
    return RunTrace(
        backend=backend,
        batch_size=batch_size,
        concurrency=concurrency,
        requests=sorted(done, key=lambda t: t.request_id),
        end=max(t.finished for t in done),
        memory=memory or {},
        kv=kv,
    )
