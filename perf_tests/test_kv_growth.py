"""The suite's "KV-cache growth" check, over the cells this session ran.

It runs after the cells because pytest runs files in name order and this one
sorts after ``test_cells.py``. Per model × backend, the slope of measured KV
bytes per request over tokens held must equal the analytic bytes per token of
:mod:`batchperf.measure.kv` (see :mod:`batchperf.measure.kv_growth`).
"""

from __future__ import annotations

import pytest

from batchperf.measure.kv_growth import DEFAULT_REL_TOL, kv_growth
from batchperf.suite.plugin import state


@pytest.mark.cpu
@pytest.mark.gpu
def test_kv_cache_growth(request: pytest.FixtureRequest) -> None:
    records = state(request.config).records
    if not records:
        pytest.skip("KV-cache growth: no performance cell ran in this session, so there is nothing to fit")
    fits, unfit = kv_growth(r.kv_point() for r in records)
    if not fits:
        pytest.skip("; ".join(unfit))
    bad = [f for f in fits if not f.agrees()]
    assert not bad, (f"KV-cache growth differs from the analytic bytes/token by more than {DEFAULT_REL_TOL:.0%}:\n"
                     + "\n".join(f.describe() for f in bad))
