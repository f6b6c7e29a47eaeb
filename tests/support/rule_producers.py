"""Every gate rule must have a producer, and every number a cell stores must have a catalogue entry.

A rule whose metric no cell writes can never fire; a stored number without an entry has no unit, direction or
export. The tests that measure a real cell of a backend (test_gate for hf-static and continuous,
test_vllm_engine's counters, test_vllm_server) check their record with :func:`rule_gaps` and
:func:`uncatalogued`; tests/measure/test_catalogue.py checks the other way round (every entry is stored).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from batchperf.measure.catalogue import BY_PATH, SECTIONS
from batchperf.regress.gate import RULES
from batchperf.results.record import CellRecord

# the backends whose real cells those tests check; every rule must be produced by at least one of them
CHECKED_BACKENDS = ("hf-static", "continuous", "vllm", "vllm-server")


def rule_gaps(record: CellRecord, device: str = "cpu") -> tuple[list[str], list[str]]:
    """(rules the cell should produce but its record lacks, rules it should not produce but its record has)."""
    should = [r for r in RULES if r.produced_on(device, record.backend, record.raw("workload.kind", "synthetic"))]
    missing = [r.path for r in should if record.value(r.path) is None]
    unexpected = [r.path for r in RULES if r not in should and record.value(r.path) is not None]
    return missing, unexpected


def stored_numbers(records: Iterable[CellRecord]) -> set[str]:
    """The path of every number (not a flag, a name or a list) in the measured sections of ``records``."""
    found: set[str] = set()
    for record in records:
        for section in SECTIONS:
            values: Any = record.raw(section) or {}
            found |= {f"{section}.{key}" for key, value in values.items()
                      if isinstance(value, (int, float)) and not isinstance(value, bool)}
    return found


def uncatalogued(record: CellRecord) -> list[str]:
    """Numbers the cell stores that the metric catalogue has no entry for."""
    return sorted(stored_numbers([record]) - BY_PATH.keys())
