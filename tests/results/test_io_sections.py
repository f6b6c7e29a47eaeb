"""Issue 38, defects 5 and 9: the reader's one shape check covers the traffic sections (slo, tenants, policy,
client, capacity, workload) and the traces' tenants, so report, recommend, export and compare never meet a
malformed one: each is refused by the reader, naming the cell and the field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from gate_samples import cell_info, results_file

from batchperf.cli import main
from batchperf.results.io import read_results
from batchperf.results.record import ResultsError

CAPACITY = {"max_load": 2.0, "bracket_high": 4.0, "target_attainment": 0.9, "resolution": 0.1,
            "attainment_at_max_load": 0.95, "max_request_rate": 8.0, "probes": 4, "search_s": 30.0,
            "converged": True, "requests_at_max_load": 64, "dispersion": 0.01}


def edited(tmp_path: Path, edit: Any) -> Path:
    record = cell_info()
    record.capacity = dict(CAPACITY)
    record.slo = {"attainment": 0.9, "offered": 8, "met": 7}
    record.tenants = {"chat": {"attainment": 0.9, "offered": 8}}
    record.workload = {"kind": "tenants", "label": "tenants-x", "load": 1.0, "slos": {"chat": {"ttft_ms": 200.0}},
                       "tenants": ["chat"]}
    record.policy = {"name": "fcfs", "text": "fcfs", "label": "fcfs", "engine": "batchperf", "params": {}}
    path = results_file(tmp_path / "r.json", [record])
    doc = json.loads(path.read_text())
    edit(doc["benchmarks"][0]["extra_info"])
    path.write_text(json.dumps(doc))
    return path


def test_the_sample_is_read(tmp_path: Path) -> None:
    assert read_results(edited(tmp_path, lambda info: None)).records[0].capacity["max_load"] == 2.0


def _set(section: str, key: str, value: Any):  # noqa: ANN202
    def edit(info: dict) -> None:
        if value is KeyError:
            del info[section][key]
        else:
            info[section][key] = value
    return edit


def _trace_tenant(value: Any):  # noqa: ANN202
    def edit(info: dict) -> None:
        info["traces"] = [{"requests": [{"request_id": 0, "tenant": value}]}]
    return edit


def _tenant_named(name: str):  # noqa: ANN202
    def edit(info: dict) -> None:
        info["tenants"] = {name: {"attainment": 0.5}}
    return edit


@pytest.mark.parametrize(("edit", "match"), [
    (_set("capacity", "max_load", KeyError), "capacity lacks max_load"),
    (_set("capacity", "max_request_rate", KeyError), "capacity lacks max_request_rate"),
    (_set("capacity", "max_load", None), "capacity.max_load is None, not a number"),
    (_set("capacity", "bracket_high", "4"), "capacity.bracket_high is '4', not a number"),
    (_set("capacity", "max_load", [2.0]), r"capacity.max_load is \[2.0\], not a number"),
    (_set("capacity", "max_load", True), "capacity.max_load is True, not a number"),
    (_set("capacity", "converged", "yes"), "capacity.converged is 'yes', not bool"),
    (_set("slo", "attainment", "high"), "slo.attainment is 'high', not a number"),
    (_set("policy", "text", 3), "policy.text is 3, not str"),
    (_set("workload", "load", True), "workload.load is True, not int or float"),
    (_set("workload", "slos", {"chat": 200}), r"workload.slos\['chat'\] is 200"),
    (_trace_tenant(7), r"traces\[0\].requests\[0\].tenant is int 7, not a name"),
    (_trace_tenant(["a"]), r"traces\[0\].requests\[0\].tenant is list \['a'\], not a name"),
    (_tenant_named("\ud800"), "a tenant's name .* holds a lone surrogate"),
    (_trace_tenant("\ud800"), r"traces\[0\].requests\[0\].tenant .* holds a lone surrogate"),
])
def test_a_malformed_traffic_section_is_refused_by_the_reader(tmp_path: Path, edit: Any, match: str) -> None:
    path = edited(tmp_path, edit)
    with pytest.raises(ResultsError, match=match) as info:
        read_results(path)
    assert str(info.value).startswith(f"{path}: ")


@pytest.mark.parametrize("argv", [["report", "--out", "{out}"], ["recommend", "--by", "capacity"], ["export"]])
def test_report_recommend_and_export_say_so_not_a_traceback(tmp_path: Path, capsys, argv: list[str]) -> None:
    path = edited(tmp_path, _set("capacity", "max_load", None))
    args = [a.replace("{out}", str(tmp_path / "page")) for a in argv]
    with pytest.raises(SystemExit) as exited:  # each command's own exit on a bad file; before, a TypeError
        main([args[0], str(path), *args[1:]])
    assert exited.value.code not in (0, None)
    assert "capacity.max_load is None, not a number" in f"{exited.value.code} {capsys.readouterr().err}"
