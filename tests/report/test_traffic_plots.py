"""The report's traffic figures: the timeline by hand, and the page built from tenant cells at several loads."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from gate_samples import cell_info, results_file
from paths import DATA

from batchperf.measure.metrics import SLO
from batchperf.measure.slo import slo_summary
from batchperf.measure.trace import RequestTrace, RunTrace
from batchperf.report import build_report
from batchperf.report.traffic_plots import TIMELINE_ROWS, timeline
from batchperf.results.record import CellRecord

SENT, WAITING, RUNNING, KV = TIMELINE_ROWS


def two_tenants(slowdown: float) -> RunTrace:
    requests = [RequestTrace(i, 10, 2, 0.1 * i, 0.1 * i + 0.05 * slowdown,
                             (0.1 * i + 0.2 * slowdown, 0.1 * i + 0.3 * slowdown), sent=0.1 * i,
                             tenant="chat" if i % 2 else "batch") for i in range(8)]
    return RunTrace("continuous", 4, 8, requests, end=max(r.finished for r in requests))


def tenant_cell(load: float, backend: str = "continuous") -> CellRecord:
    trace = two_tenants(slowdown=load)
    record = cell_info(f"cpu-tiny-qwen2-{backend}-bs4-p64-c8-wtenants-load{load:g}")
    record.cell |= {"backend": backend, "load": load, "workload": "tenants:two.toml"}
    record.slo, record.tenants = slo_summary(trace, {"chat": SLO(ttft_ms=250), "batch": SLO(e2el_ms=400)})
    record.traces = [trace.to_dict()]
    record.kv["kv_tokens_per_request_mean"] = 12.0  # as real cells store beside the bytes (the KV figure reads both)
    return record


def test_the_timeline_counts_sent_waiting_running_and_kv_by_hand() -> None:
    # one request: sent 0, admitted 1, tokens at 2 and 3 (finished 3); prompt 10
    trace = RunTrace("x", 1, 1, [RequestTrace(0, 10, 2, 0.0, 1.0, (2.0, 3.0), sent=0.0)], end=4.0)
    got = timeline(trace, points=9)  # t = 0, 0.5, ..., 4
    assert list(got["time"]) == [0.5 * i for i in range(9)]
    assert list(got[SENT]) == [1] * 9
    assert list(got[WAITING]) == [1, 1, 0, 0, 0, 0, 0, 0, 0]
    assert list(got[RUNNING]) == [0, 0, 1, 1, 1, 1, 0, 0, 0]
    assert list(got[KV]) == [0, 0, 10, 10, 11, 11, 0, 0, 0]  # prompt, then + each token generated


def test_the_timeline_of_a_tenant_counts_only_its_requests() -> None:
    trace = two_tenants(1.0)
    whole, chat = timeline(trace), timeline(trace, "chat")
    assert chat[SENT][-1] == 4 and whole[SENT][-1] == 8
    assert np.all(chat[RUNNING] <= whole[RUNNING])


def test_the_report_draws_attainment_cdfs_and_a_timeline(tmp_path: Path) -> None:
    cells = [tenant_cell(load, backend) for backend in ("continuous", "vllm") for load in (0.5, 1.0, 2.0)]
    capacity = cell_info("cpu-tiny-qwen2-continuous-bs4-p64-c8-wtenants-capacity")
    capacity.cell |= {"backend": "continuous", "workload": "tenants:two.toml"}
    capacity.slo, capacity.traces = {"attainment": 0.92}, []
    capacity.kv["kv_tokens_per_request_mean"] = 12.0
    capacity.capacity = {"max_load": 0.9, "bracket_high": 0.94, "target_attainment": 0.9, "max_request_rate": 3.0,
                         "attainment_at_max_load": 0.92}  # as `batchperf capacity` writes it: whole
    index = build_report([results_file(tmp_path / "r.json", [*cells, capacity])], tmp_path / "report")
    page = index.read_text()
    for name in ("attainment_vs_load.png", "tenant_latency_cdf.png", "run_timeline.png"):
        assert (tmp_path / "report" / name).stat().st_size > 10_000, name
        assert f"src='{name}'" in page
    assert "SLO attainment vs offered load" in page and "Latency per tenant" in page
    assert ">chat<" in page and ">batch<" in page  # the per-tenant table
    assert cells[0].tenants["chat"]["attainment"] == pytest.approx(1.0)  # the numbers behind it are real
    assert cells[-1].tenants["batch"]["attainment"] < 1


def test_results_before_slo_metrics_say_there_is_no_data(tmp_path: Path) -> None:
    index = build_report([DATA / "results_cpu_small.json"], tmp_path / "old")
    page = index.read_text()
    assert "no cell stores SLO attainment" in page and "no cell with tenants kept its raw traces" in page
    assert (tmp_path / "old" / "run_timeline.png").exists()  # any cell with raw traces has a timeline


def test_each_policy_is_a_line_of_its_own_beside_fcfs() -> None:
    """Issue 27: fcfs and aimd cells of one backend and batch size are two series, named by their policy."""
    from gate_samples import cell_info

    from batchperf.report.plots import Series

    fcfs, aimd = cell_info("c-bs4"), cell_info("c-bs4-polaimd")
    aimd.cell["policy"] = "aimd"
    series = Series([fcfs, aimd], x="load")
    assert series.key(fcfs) != series.key(aimd)
    assert [series.label(series.key(c)) for c in (fcfs, aimd)] == ["hf-static fcfs", "hf-static aimd"]


def test_a_fitted_capacity_is_drawn_with_its_interval_beside_a_bracket_from_before_issue_57(tmp_path: Path) -> None:
    from batchperf.report.traffic_plots import attainment_vs_load

    def searched(backend: str, capacity: dict[str, float]) -> CellRecord:
        record = cell_info(f"cpu-tiny-qwen2-{backend}-bs4-p64-c8-wtenants-capacity")
        record.cell |= {"backend": backend, "workload": "tenants:two.toml"}
        record.capacity = {"target_attainment": 0.9, "max_request_rate": 3.0, **capacity}
        return record

    fitted = searched("continuous", {"max_load": 0.9, "interval_low": 0.87, "interval_high": 0.93})
    bracket = searched("vllm", {"max_load": 0.9, "bracket_high": 0.94, "attainment_at_max_load": 0.92})
    path = attainment_vs_load([tenant_cell(0.5), tenant_cell(1.0), fitted, bracket], tmp_path / "a.png")
    assert path is not None and path.stat().st_size > 10_000
