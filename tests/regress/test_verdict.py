"""The one verdict vocabulary's records: how a metric verdict names its metric."""

from __future__ import annotations

import math

import pytest

from batchperf.measure.catalogue import Direction
from batchperf.regress.verdict import MetricVerdict, Verdict


def named(metric: str) -> str:
    return MetricVerdict(metric, Direction.HIGHER, Verdict.NO_CHANGE, 1.0, 1.0, 0.0, math.nan).name


@pytest.mark.parametrize(("metric", "name"), [
    ("metrics.output_throughput", "output_throughput"),
    ("tenants.attainment[chat]", "attainment[chat]"),  # the gate's per-tenant rows
    ("tenants.attainment[chat.v2]", "attainment[chat.v2]"),  # a tenant's name is never cut at its dots (STYLE 15)
    ("p99_ttft_ms[chat.v2]", "p99_ttft_ms[chat.v2]"),  # ab's per-tenant series
    ("tenants.attainment[a.b[c].d]", "attainment[a.b[c].d]"),
])
def test_a_metric_is_named_by_its_last_key_and_a_tenant_by_its_whole_name(metric: str, name: str) -> None:
    assert named(metric) == name
