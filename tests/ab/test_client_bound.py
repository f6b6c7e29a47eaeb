"""ab leaves a client-bound pair out of the metrics its client set, as the gate leaves them unjudged.

A server cell whose client lagged (:mod:`batchperf.measure.client_lag`) measured the client: its latencies, and
its throughput too when the server was not kept full. ab used to judge them as the server's.
"""

from __future__ import annotations

from dataclasses import replace

from paths import DATA

from batchperf.ab.cell import CellState
from batchperf.ab.env import Environment
from batchperf.ab.judging import add_pair, judge_cell
from batchperf.ab.settings import Settings
from batchperf.ab.stats import make_test
from batchperf.regress.verdict import Verdict
from batchperf.results.io import read_results

RECORD = read_results(DATA / "results_cpu_small.json").records[0]
LAGGED = {"client_bound": True, "reasons": ["event loop lag p99 26.8 ms"], "server_saturated": False,
          "server_occupancy": 0.4}


def settings() -> Settings:
    env = Environment("A", DATA)
    return Settings(env, replace(env, label="B"), (), DATA)


def test_a_client_bound_pair_is_left_out_of_latency_and_underfed_throughput_and_named() -> None:
    cell = CellState(RECORD.id, RECORD.fullname)
    add_pair(cell, settings(), RECORD, RECORD, 1)
    add_pair(cell, settings(), RECORD, replace(RECORD, client=LAGGED), 2)
    assert len(cell.metrics["output_throughput"].a) == 1 and len(cell.metrics["p99_ttft_ms"].a) == 1
    assert len(cell.metrics["bytes_per_token_measured"].a) == 2  # what the client cannot set: kept
    (entry,) = cell.client_bound
    assert entry.startswith("pair 2, client-bound (B): event loop lag p99 26.8 ms (left out of output_throughput, ")
    assert "p99_ttft_ms" in entry and "bytes_per_token" not in entry
    assert any("1 pair(s) client-bound" in why for why in cell.cell_verdict().notes)
    assert cell.to_dict()["client_bound"] == cell.client_bound


def test_a_saturated_server_keeps_its_throughput_even_when_its_client_lagged() -> None:
    cell = CellState(RECORD.id, RECORD.fullname)
    add_pair(cell, settings(), replace(RECORD, client={**LAGGED, "server_saturated": True}), RECORD, 1)
    assert len(cell.metrics["output_throughput"].a) == 1 and cell.metrics["p99_ttft_ms"].a == []
    (entry,) = cell.client_bound
    assert entry.startswith("pair 1, client-bound (A): event loop lag p99 26.8 ms (left out of ")
    assert "p99_ttft_ms" in entry and "throughput" not in entry


def test_a_cell_whose_every_pair_was_client_bound_is_never_passed_on_its_kv_alone() -> None:
    """Throughput (deciding) left out of every pair, KV bytes (exact, deciding) equal: the cell stays inconclusive."""
    cell = CellState(RECORD.id, RECORD.fullname)
    lagged = replace(RECORD, client=LAGGED)
    for index in range(1, 9):
        add_pair(cell, settings(), lagged, lagged, index)
    judge_cell(cell, make_test("signed-rank", 14, 0.05), 8)
    assert cell.metrics["kv_bytes_per_request_mean"].call is Verdict.NO_CHANGE
    assert cell.metrics["output_throughput"].a == [] and cell.verdict is Verdict.INCONCLUSIVE
