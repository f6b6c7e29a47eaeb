"""What tells a cell's experiment apart from another's, as the report's readers group cells.

A line of a plot (:class:`batchperf.report.plots.Series`), a group of ``batchperf recommend`` and one of
``recommend --by capacity`` are cells alike in every part of :data:`PARTS` but those their reader compares
along (the batch size, the load, the policy): one definition, so that a trace cell and a two-tenant cell at
batch size 4 are never two points of one line, nor two candidates of one group (issue 38, issue 59).
"""

from __future__ import annotations

from typing import Any

from batchperf.results.record import CellRecord

PARTS = ("run", "model", "backend", "batch_size", "concurrency", "policy", "workload", "load", "arrival")
SYNTHETIC = "synthetic"  # the workload of a cell that names none: the batch-size study's
CLOSED = "closed"  # the arrival of a closed loop (each client sends when its last request ended)


def policy_of(cell: CellRecord) -> str:
    """The batching policy a cell ran (``cell.policy``, the --batchperf-policies entry; fcfs when absent)."""
    return str(cell.cell.get("policy", "fcfs"))


def arrival_of(cell: CellRecord) -> str:
    """The arrival pattern in words: ``closed``, or ``poisson 4.0/s burst 1.0``."""
    arrival = cell.cell.get("arrival")
    if not isinstance(arrival, dict) or arrival.get("kind", CLOSED) == CLOSED:
        return CLOSED
    return f"{arrival.get('kind')} {arrival.get('rate')}/s burst {arrival.get('burstiness', 1.0)}"


def identity(cell: CellRecord, *leave_out: str) -> tuple[tuple[str, Any], ...]:
    """(part, value) for each part of :data:`PARTS` but ``leave_out``; the prompt length is its readers' own
    (a panel, a group's name)."""
    if unknown := set(leave_out) - set(PARTS):
        raise ValueError(f"leave_out: {sorted(unknown)} are not parts of a cell's identity ({', '.join(PARTS)})")
    parts = {"run": cell.source, "model": cell.model_name, "backend": cell.backend, "batch_size": cell.batch_size,
             "concurrency": cell.concurrency, "policy": policy_of(cell),
             "workload": str(cell.cell.get("workload", SYNTHETIC)), "load": cell.load, "arrival": arrival_of(cell)}
    return tuple((name, parts[name]) for name in PARTS if name not in leave_out)
