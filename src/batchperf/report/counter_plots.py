"""The report's engine-counter figure: what the scheduler actually did at each batch size.

Per prompt length, over batch size: the peak share of the KV-cache pool in use,
the batch the scheduler formed (requests per engine step, against the batch
size it was allowed: the dotted diagonal), and tokens per step. A backend that
does not report a counter has no line in that row (:mod:`batchperf.measure.counters`).
"""

from __future__ import annotations

from pathlib import Path

from batchperf.report.plots import curves_over_batch
from batchperf.results.record import CellRecord


def engine_counters_plot(cells: list[CellRecord], path: Path) -> Path | None:
    """The figure, or None when no cell has engine counters (results from before they existed)."""
    with_counters = [c for c in cells if any(c.value(f"counters.{k}") is not None for k in ROWS)]
    if not with_counters:
        return None
    rows = [(label, (lambda c, key=key, scale=scale: (v * scale) if (v := c.value(f"counters.{key}")) is not None
                     else None)) for key, (label, scale) in ROWS.items()]
    return curves_over_batch(with_counters, path, "What the engine did: KV-cache use and the batch it formed", rows,
                             identity_rows=(1,))


# counter -> (axis label, scale)
ROWS = {
    "kv_cache_usage_perc": ("peak KV-cache use (% of pool)", 100.0),
    "num_requests_running_mean": ("batch formed (requests / step)", 1.0),
    "iteration_tokens_mean": ("tokens / step", 1.0),
}
