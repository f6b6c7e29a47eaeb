"""Pooling runs into one baseline keeps each run's client-lag mark: a pooled cell whose rounds include a
client-bound run's is client-bound (its latencies describe that client)."""

from __future__ import annotations

from gate_samples import CLIENT_LAG_REASON, cell_info, client_bound, results_file

from batchperf.regress.store import pool_runs
from batchperf.results.io import read_results


def test_a_client_bound_run_marks_the_pooled_cell(tmp_path) -> None:
    plain = cell_info()
    plain.client = {"loop_lag_p99_ms": 1.0, "client_bound": False, "server_saturated": True, "reasons": [],
                    "absent": {}}
    files = [read_results(results_file(tmp_path / f"r{i}.json", [rec]))
             for i, rec in enumerate((plain, client_bound(cell_info()), plain))]
    pooled = next(iter(pool_runs(files).cells.values()))
    assert pooled.pooled_runs == 3 and pooled.client["client_bound"] is True
    assert pooled.client["reasons"] == [f"run 2 of 3: round 1 of 3: {CLIENT_LAG_REASON}"]
    assert pooled.client["loop_lag_p99_ms"] == 31.0  # the worst run's tail
    clean = next(iter(pool_runs([files[0], files[2]]).cells.values()))
    assert clean.client["client_bound"] is False and clean.client["reasons"] == []
