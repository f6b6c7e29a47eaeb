"""The performance suite: one test per cell (tier × model × backend × batch size × prompt length × concurrency).

The matrix lives in ``batchperf.suite.matrix``; narrow it with ``--batchperf-*`` options or ``-k``/``-m``.
"""

from __future__ import annotations

from typing import Any

import pytest

from batchperf.backends import Backend, CellUnsupported
from batchperf.backends.model import LoadedModel
from batchperf.measure.workload import Workload
from batchperf.suite.cell import cell_record, remeasure, run_rounds
from batchperf.suite.gate_plugin import gate_cell, gate_outcome
from batchperf.suite.matrix import Cell
from batchperf.suite.plugin import keep_record


def test_cell(
    benchmark: Any,
    request: pytest.FixtureRequest,
    batchperf_cell: Cell,
    batchperf_model: LoadedModel,
    batchperf_backend: Backend,
    batchperf_workload: Workload,
) -> None:
    try:
        traces = run_rounds(benchmark, batchperf_backend, batchperf_cell, batchperf_workload)
    except CellUnsupported as exc:  # raised before anything is measured (a given server runs another cell)
        pytest.skip(f"cell {batchperf_cell.id}: backend {batchperf_cell.params.backend!r} cannot run it: {exc}")
    cell = cell_record(batchperf_cell, batchperf_model, traces)
    keep_record(request.config, cell)
    benchmark.extra_info.update(cell.to_dict())
    errors = cell.token_count_errors
    assert not errors, f"{len(errors)} request(s) did not produce their target token count:\n" + "\n".join(errors)

    # the gate re-runs a cell once before it fails it; its verdict goes into the results JSON either way
    verdict = gate_cell(request, cell,
                        lambda: remeasure(batchperf_backend, batchperf_cell, batchperf_workload, batchperf_model))
    benchmark.extra_info.update(cell.to_dict())
    gate_outcome(request, verdict)
