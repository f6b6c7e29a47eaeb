"""The performance suite: one test per cell (tier × model × backend × batch size × prompt length × concurrency).

The matrix lives in ``batchperf.suite.matrix``; narrow it with ``--batchperf-*`` options or ``-k``/``-m``.
"""

from __future__ import annotations

from typing import Any

import pytest

from batchperf.backends import Backend
from batchperf.backends.model import LoadedModel
from batchperf.suite.cell import measure_cell
from batchperf.suite.matrix import Cell
from batchperf.workload.spec import Workload


def test_cell(
    benchmark: Any,
    request: pytest.FixtureRequest,
    batchperf_cell: Cell,
    batchperf_model: LoadedModel,
    batchperf_backend: Backend,
    batchperf_workload: Workload,
) -> None:
    measure_cell(benchmark, request, batchperf_cell, batchperf_model, batchperf_backend, batchperf_workload)
