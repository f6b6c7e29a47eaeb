"""The one cell record and the one reader/writer of results files: round trips, upgrades, every bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gate_samples import bench, cell_info, results_file
from paths import DATA

from batchperf.results import io as results_io
from batchperf.results.io import read_results, write_results
from batchperf.results.record import SCHEMA_VERSION, CellRecord, ResultsError, upgrade

REAL_V1 = DATA / "results_cpu_small_v1.json"  # schema 1, from a real CPU-tier run


def test_a_real_schema_1_file_is_upgraded_on_read() -> None:
    raw = json.loads(REAL_V1.read_text())
    first = raw["benchmarks"][0]["extra_info"]
    assert first["batchperf_schema"] == 1 and "memory" in first
    results = read_results(REAL_V1)
    rec = results.cells[raw["benchmarks"][0]["fullname"]]
    assert rec.telemetry["cell_peak_rss_bytes"] == first["telemetry"]["peak_rss_bytes"]
    assert rec.telemetry["process_peak_rss_bytes"] == first["memory"]["peak_rss_bytes"]
    assert "peak_rss_bytes" not in rec.telemetry and "memory" not in rec.to_dict()
    assert rec.to_dict()["batchperf_schema"] == SCHEMA_VERSION
    assert rec.source == REAL_V1.stem and rec.fullname.endswith(f"[{rec.id}]")
    traces = rec.run_traces()  # the old traces' memory blocks are gone too
    assert len(traces) == len(first["traces"]) and traces[0].requests


def test_records_round_trip_and_unknown_keys_survive(tmp_path: Path) -> None:
    record = cell_info("c1")
    record.other["from_the_future"] = {"x": 1}
    assert CellRecord.from_dict(record.to_dict()).to_dict() == record.to_dict()
    path = results_file(tmp_path / "r.json", [record])
    data = json.loads(path.read_text())
    data["benchmarks"].append({"name": "test_other", "fullname": "t.py::test_other", "extra_info": {"x": 1}})
    path.write_text(json.dumps(data))
    results = read_results(path)
    assert [r.id for r in results.records] == ["c1"] and len(results.others) == 1  # another plugin's entry
    out = write_results(tmp_path / "out.json", results.header, results.entries())
    again = json.loads(out.read_text())
    assert {b["fullname"] for b in again["benchmarks"]} == {b["fullname"] for b in data["benchmarks"]}
    assert read_results(out).records[0].other == {"from_the_future": {"x": 1}}


@pytest.mark.parametrize(("edit", "message"), [
    (lambda info: info.pop("metrics"), "missing metrics in extra_info"),
    (lambda info: info.update(metrics=[1, 2]), "metrics is a list, not a mapping"),
    (lambda info: info["metrics"].update(output_throughput="fast"), "metrics.output_throughput is 'fast'"),
    (lambda info: info["cell"].pop("model"), "cell lacks model"),
    (lambda info: info.update(rounds=[1]), "rounds holds something other than metric objects"),
    (lambda info: info.update(batchperf_schema=7), "cell schema 7; this batchperf reads schemas 1 and"),
    (lambda info: info["model"].update(weights="random"), "model.weights is 'random', not one of checkpoint, dummy"),
    (lambda info: info.update(efficiency=[0.5]), "efficiency is a list, not a mapping"),
    (lambda info: info.update(efficiency={"decode_mbu": "high"}), "efficiency.decode_mbu is 'high', not a number"),
])
def test_a_bad_cell_names_the_file_the_cell_and_the_field(tmp_path: Path, edit, message: str) -> None:
    path = results_file(tmp_path / "r.json", [cell_info("c1")])
    data = json.loads(path.read_text())
    edit(data["benchmarks"][0]["extra_info"])
    path.write_text(json.dumps(data))
    with pytest.raises(ResultsError) as exc:
        read_results(path)
    assert str(exc.value).startswith(f"{path}: perf_tests/test_cells.py::test_cell[c1]: ")
    assert message in str(exc.value)


def test_bad_files_are_named_with_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ResultsError, match="no such results file.*--benchmark-json"):
        read_results(tmp_path / "missing.json")
    with pytest.raises(ResultsError, match="is a folder"):
        read_results(tmp_path)
    (tmp_path / "cut.json").write_text('{"benchmarks": [')
    with pytest.raises(ResultsError, match="not valid JSON.*re-run"):
        read_results(tmp_path / "cut.json")
    (tmp_path / "other.json").write_text(json.dumps({"benchmarks": [{"name": "x", "extra_info": {}}]}))
    with pytest.raises(ResultsError, match="no batchperf cells"):
        read_results(tmp_path / "other.json")
    twice = results_file(tmp_path / "twice.json", [cell_info("c1")])
    data = json.loads(twice.read_text())
    data["benchmarks"].append(bench(cell_info("c1")))
    twice.write_text(json.dumps(data))
    with pytest.raises(ResultsError, match=r"cell .*test_cell\[c1\] appears twice"):
        read_results(twice)


def test_an_interrupted_write_keeps_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = results_file(tmp_path / "r.json", [cell_info("c1")])
    before = path.read_bytes()
    results = read_results(path)

    def interrupted(src: str, dst: str) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(results_io.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_results(path, results.header, results.entries())
    assert path.read_bytes() == before and list(tmp_path.glob(".*.tmp")) == []


def test_upgrade_leaves_current_records_alone() -> None:
    info = cell_info("c1").to_dict()
    assert upgrade(info) is info


def test_weights_and_efficiency_are_typed_and_default_for_older_records() -> None:
    old = cell_info("c1")  # written before dummy weights and MBU: no model.weights, no efficiency
    assert old.weights == "checkpoint" and old.efficiency == {}
    new = CellRecord.from_dict(old.to_dict() | {"model": {**old.model, "weights": "dummy"},
                                                "efficiency": {"device": "NVIDIA H200", "decode_mbu": 0.41,
                                                               "prefill_mfu": None}})
    assert new.weights == "dummy" and new.value("efficiency.decode_mbu") == 0.41
    assert new.value("efficiency.prefill_mfu") is None  # no peak known: absent, not zero
    assert CellRecord.from_dict(new.to_dict()).to_dict() == new.to_dict()


@pytest.mark.parametrize(("workload", "cell", "load"), [
    (None, None, 1.0),  # the matrix stores no load at 1
    (None, 4, 4.0),
    (2.5, 2.5, 2.5),  # a probe: both say it
    (2.5, None, 2.5),  # a capacity record: its probe's load kept in the workload only
    (True, None, 1.0),  # not a number: never read as 1 by accident of bool being an int
    (None, "2", 1.0),
])
def test_a_cells_load_is_read_in_one_place(workload: object, cell: object, load: float) -> None:
    """The report (its series and recommend) and the capacity search each had a ``load_of``: they disagreed on a
    capacity record (2.5 and 1) and on a malformed load (1 and NaN). Now both read ``CellRecord.load``."""
    record = cell_info("c1")
    if workload is not None:
        record.workload["load"] = workload
    if cell is not None:
        record.cell["load"] = cell
    assert record.load == load
