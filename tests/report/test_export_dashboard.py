"""The Grafana dashboard under ci/grafana: valid JSON that queries only metrics ``batchperf export`` writes."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from paths import REPO

from batchperf.report.export import CHANGE_POINT_TIME, exported_names

DASHBOARD = REPO / "ci" / "grafana" / "batchperf-history.json"
METRIC = re.compile(r"\bbatchperf_[a-z0-9_]+\b")


def queries(node: Any) -> Iterator[str]:
    """Every PromQL text in the dashboard: targets' and annotations' ``expr``, template variables' queries."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("expr", "definition") and isinstance(value, str):
                yield value
            elif key == "query" and isinstance(value, dict) and isinstance(value.get("query"), str):
                yield value["query"]
            else:
                yield from queries(value)
    elif isinstance(node, list):
        for item in node:
            yield from queries(item)


def test_the_dashboard_is_valid_json_and_queries_only_exported_metrics() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    texts = list(queries(dashboard))
    used = {name for text in texts for name in METRIC.findall(text)}
    assert used and used <= exported_names(), f"not written by batchperf export: {sorted(used - exported_names())}"
    for panel in dashboard["panels"]:
        assert panel["targets"] and all(METRIC.search(t["expr"]) for t in panel["targets"]), panel["title"]
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))


def test_it_plots_throughput_and_the_p99s_with_change_points_as_annotations() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert any("batchperf_output_throughput_tokens_per_second" in e for e in exprs)
    for latency in ("ttft", "tpot", "itl", "e2el"):
        assert any(f"batchperf_{latency}_seconds" in e and 'stat="p99"' in e for e in exprs), latency
    (annotation,) = dashboard["annotations"]["list"]
    assert CHANGE_POINT_TIME in annotation["expr"] and annotation["useValueForTime"] is True
    assert annotation["expr"].rstrip().endswith("* 1000")  # Grafana reads the value as milliseconds
