"""Hypothesis against the one results reader (issue 26): random JSON in every place of a results file — wrong
types, huge and non-finite numbers, deep nesting, missing and extra sections — is either read (and then written
back, read again and exported) or refused with the reader's own ResultsError, never anything else."""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path
from typing import Any

from gate_samples import bench, cell_info, results_file
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from batchperf.measure.catalogue import CATALOGUE
from batchperf.report.export import openmetrics
from batchperf.results.io import read_results, write_results
from batchperf.results.record import ResultsError

DEEP = "\x00deep\x00"  # placeholders replaced in the JSON text: json.dumps cannot write 5000 levels or NaN as text
HUGE = "\x00huge\x00"

scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2 ** 70), 2 ** 70),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8),
                    st.sampled_from([DEEP, HUGE]))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                        st.dictionaries(st.text(max_size=6), inner, max_size=4)),
                      max_leaves=12)
BASE = None


def traffic_cell() -> Any:
    """A cell with every traffic section (issue 38: the fuzz reaches slo, tenants, policy, client, capacity,
    workload and a trace's tenant, which report, recommend and export read)."""
    record = cell_info("c1")
    record.slo = {"attainment": 0.9, "request_goodput": 2.0, "offered": 8, "met": 7, "jain_fairness": 0.9}
    record.tenants = {"chat.v2": {"attainment": 0.9, "offered": 8, "p99_ttft_ms": 10.0}}
    record.policy = {"name": "fair", "text": "fair", "label": "fair", "engine": "batchperf", "params": {}}
    record.client = {"loop_lag_p99_ms": 1.0, "client_bound": False, "server_saturated": True, "reasons": []}
    record.capacity = {"max_load": 2.0, "bracket_high": 4.0, "target_attainment": 0.9, "converged": True,
                       "probes": 3, "why": "", "max_request_rate": 8.0, "attainment_at_max_load": 0.95}
    record.workload = {"kind": "tenants", "label": "tenants-x", "load": 1.0, "open_loop": True,
                       "slos": {"chat.v2": {"ttft_ms": 200.0, "tpot_ms": None}}, "tenants": ["chat.v2"]}
    record.traces = [{"requests": [{"request_id": 0, "tenant": "chat.v2"}]}]
    return record


def base_document() -> dict[str, Any]:
    global BASE
    if BASE is None:
        with tempfile.TemporaryDirectory() as tmp:
            path = results_file(Path(tmp) / "r.json", [traffic_cell(), cell_info("c2", throughput=120.0)])
            BASE = json.loads(path.read_text())
            BASE["benchmarks"].append({**bench(cell_info("c3")), "extra_info": {"other_plugin": 1}})
    return json.loads(json.dumps(BASE))


def paths(node: Any, at: tuple = ()) -> list[tuple]:
    """Every place in ``node`` (dict keys and list items), outermost first."""
    out = [at]
    if isinstance(node, dict):
        for key, value in node.items():
            out += paths(value, (*at, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out += paths(value, (*at, i))
    return out


@st.composite
def documents(draw: st.DrawFn) -> str:
    doc = base_document()
    for _ in range(draw(st.integers(1, 4))):
        places = paths(doc)
        at = draw(st.sampled_from(places))
        action = draw(st.sampled_from(["replace", "delete", "add"]))
        if not at:
            if action == "replace":
                doc = draw(values)
            continue
        parent = doc
        for key in at[:-1]:
            parent = parent[key]
        if action == "replace":
            parent[at[-1]] = draw(values)
        elif action == "delete":
            del parent[at[-1]]
        elif isinstance(parent[at[-1]], dict):  # an extra section or field
            parent[at[-1]][draw(st.text(max_size=6))] = draw(values)
    text = json.dumps(doc)  # NaN and Infinity as Python writes them (pytest-benchmark does too)
    depth = draw(st.sampled_from([70, 990, 5000]))
    return (text.replace(json.dumps(DEEP), "[" * depth + "]" * depth)
            .replace(json.dumps(HUGE), "9" * draw(st.sampled_from([310, 400, 5000]))))


@settings(max_examples=int(__import__("os").environ.get("FUZZ_N", "150")), deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(text=documents())
def test_random_json_is_read_or_refused_by_the_reader_never_crashes(tmp_path: Path, text: str) -> None:
    path = tmp_path / "r.json"
    path.write_text(text)
    try:
        results = read_results(path)
    except ResultsError as exc:
        assert str(exc).startswith(str(path))
        return
    for record in results.records:  # what every reader does with a cell it was given
        for metric in CATALOGUE:
            value = record.value(metric.path)
            assert value is None or math.isfinite(value)
        assert record.id and record.batch_size >= 1 and record.concurrency >= 1
        if record.capacity:  # what the report and recommend --by capacity read (the bracket's top is optional:
            # a search since issue 57 stores its interval instead, and the report reads whichever is there)
            cap = record.capacity
            top = cap.get("interval_high", cap.get("bracket_high", cap["max_load"]))
            assert math.isfinite(float(cap["max_load"]) + float(cap["max_request_rate"]) + float(top))
        for tenant, block in record.tenants.items():  # what export and the per-tenant gate read
            tenant.encode("utf-8")  # a name export can write (a lone surrogate raises); "" is the no-tenant block
            assert all(isinstance(v, (int, float)) for v in block.values())
        for trace in record.traces:
            assert all(r.get("tenant") is None or isinstance(r["tenant"], str) for r in trace["requests"])
    again = read_results(write_results(tmp_path / "out.json", results.header, results.entries()))
    def written(run: Any) -> dict[str, str]:  # as text: a NaN kept in a non-measured field equals itself there
        return {name: json.dumps(rec.to_dict(), sort_keys=True) for name, rec in run.cells.items()}

    assert written(again) == written(results)
    assert openmetrics(results).endswith("# EOF\n")
