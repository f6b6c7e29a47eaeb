"""The report's engine-counter figure: what the scheduler actually did at each batch size.

Per prompt length, over batch size: the peak share of the KV-cache pool in use,
the batch the scheduler formed (requests per engine step, against the batch
size it was allowed: the dotted diagonal, row ``IDENTITY_ROW``), and tokens per
step. A backend that does not report a counter has no line in that row
(:mod:`batchperf.measure.counters`). :mod:`batchperf.report.plots` draws it.
"""

from __future__ import annotations

from collections.abc import Callable

from batchperf.results.record import CellRecord

TITLE = "What the engine did: KV-cache use and the batch it formed"
# counter -> (axis label, scale)
ROWS = {
    "kv_cache_usage_perc": ("peak KV-cache use (% of pool)", 100.0),
    "num_requests_running_mean": ("batch formed (requests / step)", 1.0),
    "iteration_tokens_mean": ("tokens / step", 1.0),
}
IDENTITY_ROW = 1  # a batch formed can reach the batch size at most


def with_counters(cells: list[CellRecord]) -> list[CellRecord]:
    """The cells with any counter of the figure (none: results from before counters existed)."""
    return [c for c in cells if any(c.value(f"counters.{key}") is not None for key in ROWS)]


def _scaled(key: str, scale: float) -> Callable[[CellRecord], float | None]:
    def value(cell: CellRecord) -> float | None:
        v = cell.value(f"counters.{key}")
        return None if v is None else v * scale
    return value


def rows() -> list[tuple[str, Callable[[CellRecord], float | None]]]:
    return [(label, _scaled(key, scale)) for key, (label, scale) in ROWS.items()]
