"""Every gate rule must have a producer: a rule whose metric no cell writes can never fire.

The tests that measure a real cell of a backend (test_gate for hf-static and continuous,
test_vllm_engine, test_vllm_server) check their record with :func:`rule_gaps`.
"""

from __future__ import annotations

from batchperf.regress.gate import RULES
from batchperf.results.record import CellRecord

# the backends whose real cells those tests check; every rule must be produced by at least one of them
CHECKED_BACKENDS = ("hf-static", "continuous", "vllm", "vllm-server")


def rule_gaps(record: CellRecord, device: str = "cpu") -> tuple[list[str], list[str]]:
    """(rules the cell should produce but its record lacks, rules it should not produce but its record has)."""
    should = [r for r in RULES if r.produced_on(device, record.backend)]
    missing = [r.path for r in should if record.value(r.path) is None]
    unexpected = [r.path for r in RULES if r not in should and record.value(r.path) is not None]
    return missing, unexpected
