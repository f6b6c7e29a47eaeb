"""``batchperf export``: OpenMetrics text by prometheus_client, the names and labels, and bad input.
(The real Pushgateway and Prometheus are in test_export_prometheus.py.)"""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from gate_samples import bench, cell_info, results_file
from paths import DATA

from batchperf.cli import main
from batchperf.launch.server_process import free_port
from batchperf.measure.counters import COUNTERS, summarise
from batchperf.report.export import CHANGE_POINT_TIME, FAMILIES, exported_names, openmetrics
from batchperf.results.io import read_results

REAL = DATA / "results_cpu_small.json"


def families(text: str) -> dict:
    from prometheus_client.openmetrics.parser import text_string_to_metric_families

    return {f.name: f for f in text_string_to_metric_families(text)}


def test_every_metric_of_a_cell_is_a_gauge_in_seconds_with_its_labels() -> None:
    text = openmetrics(read_results(REAL))
    assert text.endswith("# EOF\n")
    parsed = families(text)
    record = read_results(REAL).find("", "cpu-tiny-qwen2-hf-static-bs8-p64-c8")
    ttft = {s.labels["stat"]: s.value for s in parsed["batchperf_ttft_seconds"].samples
            if s.labels["cell_id"] == record.id}
    assert ttft == {stat: record.metrics[f"{stat}_ttft_ms"] / 1000 for stat in ("mean", "median", "p90", "p99", "std")}
    tput = next(s for s in parsed["batchperf_output_throughput_tokens_per_second"].samples
                if s.labels["cell_id"] == record.id)
    assert tput.value == record.metrics["output_throughput"]
    assert {k: tput.labels[k] for k in ("model", "backend", "batch_size", "prompt_len", "concurrency", "tier")} == {
        "model": "tiny-qwen2", "backend": "hf-static", "batch_size": "8", "prompt_len": "64", "concurrency": "8",
        "tier": "cpu"}
    assert tput.labels["fingerprint"] == "cpu-amd-epyc-2c-9bb45cf7fc" and tput.labels["commit"].startswith("6de10eb")
    assert tput.labels["pytest_benchmark_version"] == "5.3.1"  # upgrade axes, as valid label names
    assert parsed["batchperf_ttft_seconds"].unit == "seconds"
    assert all(f.type == "gauge" for f in parsed.values())


def test_engine_counters_of_a_real_run_are_exported_where_the_backend_has_them() -> None:
    results = read_results(DATA / "results_cpu_counters.json")
    parsed = families(openmetrics(results))
    preempted = {s.labels["backend"] for s in parsed["batchperf_engine_preemptions"].samples}
    assert preempted == {"continuous", "vllm"}  # hf-static has no scheduler: no sample, not a zero
    padding = {s.labels["backend"] for s in parsed["batchperf_engine_padding_waste_ratio"].samples}
    assert padding == {"hf-static"}
    for sample in parsed["batchperf_engine_step_requests_mean"].samples:
        assert 0 < sample.value <= int(sample.labels["batch_size"])  # the batch formed never exceeds the batch size


def test_names_follow_prometheus_conventions() -> None:
    for family in FAMILIES:
        assert re.fullmatch(r"batchperf_[a-z0-9_]+", family.name), family.name
        assert not family.name.endswith(("_total", "_ms", "_count", "_sum", "_bucket")), family.name
        assert not family.unit or family.name.endswith("_" + family.unit), family.name
    exported = {e.path for f in FAMILIES for e in f.entries}
    assert {f"counters.{c.name}" for c in COUNTERS} <= exported, "every engine counter is exported"


def test_engine_counters_are_exported_and_absent_ones_have_no_sample(tmp_path: Path) -> None:
    record = cell_info()
    record.counters = summarise([{"engine_steps": 10, "iteration_tokens_total": 40, "running_request_steps": 30,
                                  "wasted_token_slots": 4, "computed_token_slots": 40,
                                  "absent": {"num_preemptions": "static batches"}}])
    parsed = families(openmetrics(read_results(results_file(tmp_path / "r.json", [record]))))
    assert [s.value for s in parsed["batchperf_engine_steps"].samples] == [10]
    assert [s.value for s in parsed["batchperf_engine_padding_waste_ratio"].samples] == [0.1]
    assert "batchperf_engine_preemptions" not in parsed  # absent, never a zero


def test_label_values_with_quotes_backslashes_and_newlines_are_escaped(tmp_path: Path) -> None:
    odd = 'cell "quoted" \\ back\nslash'
    record = cell_info(cell_id=odd)
    record.cell["model"] = 'tiny"\n'
    text = openmetrics(read_results(results_file(tmp_path / "r.json", [record])))
    assert '\\"quoted\\"' in text and "\\n" in text and "\\\\" in text
    sample = families(text)["batchperf_output_throughput_tokens_per_second"].samples[0]
    assert sample.labels["cell_id"] == odd and sample.labels["model"] == 'tiny"\n'  # read back exactly


def test_change_points_of_the_history_are_exported_for_annotations(tmp_path: Path) -> None:
    folder = tmp_path / "history"
    folder.mkdir()
    start = datetime(2026, 1, 1, 2, 0)
    for night in range(12):
        record = cell_info(throughput=100.0 if night < 6 else 80.0)
        data = {"machine_info": {}, "commit_info": {"id": f"{night:040x}"},
                "datetime": (start + timedelta(days=night)).isoformat(), "benchmarks": [bench(record)]}
        (folder / f"n{night:02d}.json").write_text(json.dumps(data))
    out = tmp_path / "out.om"
    assert main(["export", str(folder / "n11.json"), "--out", str(out), "--history", str(folder)]) == 0
    parsed = families(out.read_text())
    points = [s for s in parsed[CHANGE_POINT_TIME].samples if s.labels["metric"] == "output_throughput"]
    assert [(p.labels["direction"], p.value) for p in points] == [("worse", (start + timedelta(days=6)).timestamp())]
    assert CHANGE_POINT_TIME in exported_names()


def test_a_results_file_without_batchperf_data_is_a_clear_error(tmp_path: Path) -> None:
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"benchmarks": [{"name": "test_x", "stats": {}, "extra_info": {}}]}))
    with pytest.raises(SystemExit, match="no batchperf cells in it"):
        main(["export", str(other)])
    listing = tmp_path / "list.json"
    listing.write_text("[]")
    with pytest.raises(SystemExit, match="not a pytest-benchmark results file"):
        main(["export", str(listing)])


def test_a_pushgateway_that_is_down_is_a_clear_error_and_the_results_file_is_untouched(tmp_path: Path) -> None:
    results = tmp_path / "results.json"
    results.write_bytes(REAL.read_bytes())
    before = results.stat().st_mtime_ns, results.read_bytes()
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with pytest.raises(SystemExit) as failed:
        main(["export", str(results), "--push", url])
    message = str(failed.value)
    assert f"to the Pushgateway at {url} failed" in message and "Connection refused" in message
    assert "the results file is unchanged" in message
    assert (results.stat().st_mtime_ns, results.read_bytes()) == before


def test_per_tenant_numbers_are_exported_with_a_tenant_label(tmp_path: Path) -> None:
    record = cell_info()
    record.slo = {"attainment": 0.75, "request_goodput": 3.0, "offered": 4, "met": 3, "tenant_count": 2,
                  "jain_fairness": 0.9, "max_service_gap_tokens": 40.0}
    record.tenants = {"chat": {"attainment": 1.0, "p99_ttft_ms": 120.0},
                      'we"ird': {"attainment": 0.5, "p99_ttft_ms": 900.0}}
    parsed = families(openmetrics(read_results(results_file(tmp_path / "r.json", [record]))))
    per_tenant = {s.labels["tenant"]: s.value for s in parsed["batchperf_tenant_slo_attainment_ratio"].samples}
    assert per_tenant == {"chat": 1.0, 'we"ird': 0.5}  # a quote in a tenant name escaped by prometheus_client
    ttft = {(s.labels["tenant"], s.labels["stat"]): s.value for s in parsed["batchperf_tenant_ttft_seconds"].samples}
    assert ttft == {("chat", "p99"): pytest.approx(0.120), ('we"ird', "p99"): pytest.approx(0.900)}
    overall = parsed["batchperf_slo_attainment_ratio"].samples
    assert [s.value for s in overall] == [0.75] and "tenant" not in overall[0].labels
    assert parsed["batchperf_tenant_jain_fairness_ratio"].samples[0].value == 0.9
