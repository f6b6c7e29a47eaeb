"""Every gate rule must have a producer, and every number a cell stores must have a catalogue entry.

A rule whose metric no cell writes can never fire; a stored number without an entry has no unit, direction or
export. The tests that measure a real cell of a backend (test_gate for hf-static and continuous,
test_vllm_engine's counters, test_vllm_server) check their record with :func:`rule_gaps` and
:func:`uncatalogued`; tests/measure/test_catalogue.py checks the other way round (every entry is stored).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from batchperf.measure.catalogue import BY_PATH, GATED, METRIC_SECTIONS, PER_TENANT
from batchperf.results.record import CellRecord

# the backends whose real cells those tests check; every rule must be produced by at least one of them
CHECKED_BACKENDS = ("hf-static", "continuous", "vllm", "vllm-server")


def rule_gaps(record: CellRecord, device: str = "cpu") -> tuple[list[str], list[str]]:
    """(rules the cell should produce but its record lacks, rules it should not produce but its record has)."""
    should = [r for r in GATED if r.produced_on(device, record.backend, record.raw("workload.kind", "synthetic"))]

    def has(rule: Any) -> bool:
        if rule.per_tenant:
            return bool(record.tenants) and all(record.value(f"{rule.section}.{t}.{rule.name}") is not None
                                                for t in record.tenants)
        return record.value(rule.path) is not None

    should = [r for r in should if r.section != "capacity"]  # batchperf capacity's file, not a cell: its own test
    missing = [r.path for r in should if not has(r)]
    unexpected = [r.path for r in GATED if r not in should and r.section != "capacity" and has(r)]
    return missing, unexpected


def stored_numbers(records: Iterable[CellRecord]) -> set[str]:
    """The path of every number (not a flag, a name or a list) in the measured sections of ``records``."""
    found: set[str] = set()
    for record in records:
        for section in METRIC_SECTIONS:
            values: Any = record.raw(section) or {}
            # a per-tenant section holds one block per tenant: its numbers are named by their key in the block
            blocks = values.values() if section == PER_TENANT else [values]
            found |= {f"{section}.{key}" for block in blocks for key, value in block.items()
                      if isinstance(value, (int, float)) and not isinstance(value, bool)}
    return found


def uncatalogued(record: CellRecord) -> list[str]:
    """Numbers the cell stores that the metric catalogue has no entry for."""
    return sorted(stored_numbers([record]) - BY_PATH.keys())
