"""The one verdict vocabulary's records: how a metric verdict names its metric."""

from __future__ import annotations

import math
import re

import pytest

from batchperf.measure.catalogue import Direction
from batchperf.regress.verdict import CellVerdict, MetricVerdict, Verdict, header, render_verdicts_markdown


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


def columns(row: str) -> int:
    """The columns of a Markdown table row: its '|' that no backslash escapes, less one."""
    return len(re.findall(r"(?<!\\)\|", row)) - 1


@pytest.mark.parametrize("ab", [False, True])
def test_a_pipe_or_a_line_break_in_a_metric_stays_in_its_markdown_column(ab: bool) -> None:
    # a tenant's name is the user's (traffic files): "chat|v2" made a row of one column more than its header
    metric = MetricVerdict("tenants.attainment[chat|v2\nbeta]", Direction.HIGHER, Verdict.REGRESSION, 1.0, 0.5,
                           -0.5, 0.1)
    extras = {} if ab else {"cpu-x": [("output|throughput", "1", "2", "+100.0%", "", "")]}
    lines = render_verdicts_markdown([CellVerdict("cpu-x", Verdict.REGRESSION, (metric,))], ab=ab, extras=extras)
    table = [line for line in lines if line.startswith("|")]
    assert len(table) == (3 if ab else 4) and all(columns(row) == len(header(ab)) for row in table)
    assert "| **attainment[chat\\|v2 beta]** |" in "\n".join(table)
