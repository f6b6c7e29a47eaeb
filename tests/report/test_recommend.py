"""The SLA batch-size recommender on hand-made results (metrics computed from hand-made traces)."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

import pytest

from batchperf.cli.recommend import add_cli_args, main
from batchperf.measure.metrics import compute_metrics
from batchperf.measure.trace import RequestTrace, RunTrace
from batchperf.report.recommend import SLOTargets, recommend
from batchperf.results.io import read_results
from batchperf.results.record import SCHEMA_VERSION, CellRecord


def run_trace(bs: int, e2el_s: list[float], end: float, ttft_s: float = 0.01) -> RunTrace:
    """Requests sent at 0, first token at ``ttft_s``, second (last) at their E2E latency."""
    requests = [RequestTrace(i, 128, 2, 0.0, 0.0, (ttft_s, e2el)) for i, e2el in enumerate(e2el_s)]
    return RunTrace("hf-static", bs, 8, requests, end=end)


def cell(bs: int, trace: RunTrace, prompt: str = "128", backend: str = "hf-static", conc: int = 8,
         errors: list[str] | None = None) -> dict:
    return {
        "batchperf_schema": SCHEMA_VERSION,
        "cell": {"id": f"cpu-m-{backend}-bs{bs}-p{prompt}-c{conc}", "tier": "cpu", "model": "m", "backend": backend,
                 "batch_size": bs, "prompt_len": prompt, "concurrency": conc},
        "metrics": compute_metrics(trace),
        "rounds": [compute_metrics(trace)],
        "kv": {},
        "token_count_errors": errors or [],
        "traces": [trace.to_dict()],
    }


def records(*cells: dict) -> list[CellRecord]:
    return [CellRecord.from_dict(c, source="run") for c in cells]


def sweep() -> list[CellRecord]:
    """16 requests each; bigger batches finish sooner (more tok/s) with longer tails."""
    return records(
        cell(1, run_trace(1, [0.10] * 16, end=3.2)),  # 10 tok/s, P99 100 ms
        cell(4, run_trace(4, [0.30] * 16, end=1.6)),  # 20 tok/s, P99 300 ms
        cell(8, run_trace(8, [0.60] * 16, end=0.8)),  # 40 tok/s, P99 600 ms
        cell(16, run_trace(16, [1.20] * 16, end=0.64)),  # 50 tok/s, P99 1200 ms
    )


def test_highest_throughput_meeting_the_slo_wins_and_each_other_says_why():
    [rec] = recommend(sweep(), SLOTargets(p99_e2el_ms=700))
    assert rec.batch_size == 8
    verdicts = {c.batch_size: c.verdict for c in rec.candidates}
    assert verdicts[8] == "recommended"
    assert verdicts[16] == "rejected: P99 E2EL 1,200.0 ms > 700.0 ms"
    assert verdicts[4] == "meets the SLOs, but 20.00 < 40.00 tok/s of bs 8"
    assert verdicts[1].startswith("meets the SLOs, but 10.00")


def test_every_slo_counts():
    slo = SLOTargets(p99_e2el_ms=5000, p99_ttft_ms=5, p99_tpot_ms=1000)  # TTFT is 10 ms everywhere
    [rec] = recommend(sweep(), slo)
    assert rec.batch_size is None
    assert all("P99 TTFT 10.0 ms > 5.0 ms" in c.verdict for c in rec.candidates)
    [rec] = recommend(sweep(), SLOTargets(p99_tpot_ms=400))  # TPOT = E2EL - TTFT over 1 gap
    assert rec.batch_size == 4
    assert {c.batch_size: c.verdict for c in rec.candidates}[8] == "rejected: P99 TPOT 590.0 ms > 400.0 ms"


def test_failed_or_miscounted_cells_are_rejected_whatever_their_speed():
    cells = sweep()
    bad = replace(cells[2], token_count_errors=["request 3: generated 1 tokens, target 2"])
    [rec] = recommend([cells[0], cells[1], bad], SLOTargets(p99_e2el_ms=700))
    assert rec.batch_size == 4
    assert "1 request(s) with the wrong number of tokens" in rec.candidates[2].verdict


def test_a_tie_goes_to_the_smaller_batch():
    same = run_trace(4, [0.2] * 16, end=1.0)
    [rec] = recommend(records(cell(8, same), cell(4, same)), SLOTargets(p99_e2el_ms=500))
    assert rec.batch_size == 4


def test_groups_split_by_prompt_backend_and_concurrency():
    cells = sweep() + records(cell(4, run_trace(4, [0.3] * 16, end=1.6), prompt="512"),
                              cell(4, run_trace(4, [0.3] * 16, end=1.6), backend="continuous"),
                              cell(4, run_trace(4, [0.3] * 16, end=1.6), conc=16))
    recs = recommend(cells, SLOTargets(p99_e2el_ms=700))
    assert [(r.prompt_len, r.backend, r.concurrency, r.batch_size) for r in recs] == [
        ("128", "continuous", 8, 4), ("128", "hf-static", 8, 8), ("128", "hf-static", 16, 4),
        ("512", "hf-static", 8, 4)]


def test_goodput_ranking_counts_only_requests_within_the_slo():
    # bs 8: faster overall, but 1 of 100 requests misses 100 ms (P99 still meets it: 50 + 0.01 × 950 = 59.5 ms)
    fast_with_a_miss = run_trace(8, [0.05] * 99 + [1.0], end=1.0)
    all_on_time = run_trace(4, [0.05] * 100, end=1.005)
    cells = records(cell(8, fast_with_a_miss), cell(4, all_on_time))
    slo = SLOTargets(p99_e2el_ms=100)
    [by_tput] = recommend(cells, slo)
    [by_good] = recommend(cells, slo, by="goodput")
    assert by_tput.batch_size == 8
    assert by_good.batch_size == 4
    assert {c.batch_size: c.score for c in by_good.candidates} == pytest.approx({8: 99.0, 4: 100 / 1.005})


def test_goodput_needs_traces():
    with pytest.raises(ValueError, match="no raw traces.*--by throughput"):
        recommend([replace(sweep()[0], traces=[])], SLOTargets(p99_e2el_ms=700), by="goodput")


def test_slo_targets_are_validated():
    with pytest.raises(ValueError, match="at least one SLO"):
        SLOTargets()
    with pytest.raises(ValueError, match="p99_ttft_ms must be > 0"):
        SLOTargets(p99_ttft_ms=0)


def _results_file(tmp_path: Path, cells: list[CellRecord]) -> Path:
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"benchmarks": [{"name": c.id, "fullname": f"t.py::test_cell[{c.id}]",
                                                "extra_info": c.to_dict()} for c in cells]}))
    return path


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_cli_args(parser)
    return parser.parse_args(list(argv))


def test_cli_prints_the_table_and_exits_1_when_nothing_meets_the_slo(tmp_path, capsys):
    path = _results_file(tmp_path, sweep())
    assert read_results(path).records[0].batch_size == 1
    assert main(_args(str(path), "--p99-e2el-ms", "700")) == 0
    out = capsys.readouterr().out
    assert "m · prompt 128 · hf-static · concurrency 8: batch size 8 (40.00 output tok/s, P99 E2EL 600.0 ms)" in out
    assert "1 of 1 groups have a batch size meeting the SLOs" in out
    assert main(_args(str(path), "--p99-e2el-ms", "50")) == 1
    out = capsys.readouterr().out
    assert "NO batch size meets the SLOs" in out and "relax the SLOs" in out


def test_cli_json_and_errors(tmp_path, capsys):
    path = _results_file(tmp_path, sweep())
    assert main(_args(str(path), "--p99-e2el-ms", "700", "--json")) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["groups"][0]["batch_size"] == 8 and data["slo"]["p99_e2el_ms"] == 700
    with pytest.raises(SystemExit, match="at least one SLO"):
        main(_args(str(path)))
    with pytest.raises(SystemExit, match="no such results file"):
        main(_args(str(tmp_path / "missing.json"), "--p99-e2el-ms", "1"))
    (tmp_path / "plain.json").write_text(json.dumps({"benchmarks": [{"name": "x", "extra_info": {}}]}))  # not ours
    with pytest.raises(SystemExit, match="no batchperf cells"):
        main(_args(str(tmp_path / "plain.json"), "--p99-e2el-ms", "1"))


def _traffic(bs: int, workload: str, load: float | None = None) -> CellRecord:
    data = cell(bs, run_trace(bs, [0.3] * 16, end=1.6))
    data["cell"] |= {"workload": workload, "id": data["cell"]["id"] + "-w" + workload.partition(":")[0]}
    if load is not None:
        data["cell"] |= {"load": load, "id": data["cell"]["id"] + f"-load{load:g}"}
    return CellRecord.from_dict(data, source="run")


def test_traffic_cells_of_one_file_are_groups_of_their_own(tmp_path, capsys):
    # issue 59, 6: the CI slice's one file (synthetic, trace and two-tenant cells at bs 4) exited 1, "batch sizes
    # [1, 4, 4, 8] repeat; pass one results file per run": the groups lacked the workload the report's lines have
    cells = sweep() + [_traffic(4, "trace:mini_trace.jsonl"), _traffic(4, "tenants:two.toml"),
                       _traffic(8, "tenants:two.toml"), _traffic(4, "tenants:two.toml", load=2.0)]
    recs = recommend(cells, SLOTargets(p99_e2el_ms=700))
    assert [(r.workload, [c.batch_size for c in r.candidates]) for r in recs] == [
        ("synthetic", [1, 4, 8, 16]), ("tenants:two.toml", [4, 8]), ("tenants:two.toml at load 2x", [4]),
        ("trace:mini_trace.jsonl", [4])]
    path = _results_file(tmp_path, cells)
    assert main(_args(str(path), "--p99-e2el-ms", "700")) == 0
    out = capsys.readouterr().out
    assert "m · prompt 128 · hf-static · concurrency 8 · tenants:two.toml at load 2x: batch size 4" in out
    assert "m · prompt 128 · hf-static · concurrency 8: batch size 8" in out
