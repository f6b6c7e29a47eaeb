"""The report: the knee rule on hand-made curves, and the page built from results files."""

from __future__ import annotations

import argparse
import html
import json
import math
import shutil
from pathlib import Path

import pytest
from paths import DATA

from batchperf.cli.report import add_cli_args, main
from batchperf.report import build_report
from batchperf.report.knee import knee
from batchperf.results.record import CellRecord


def test_knee_is_the_smallest_batch_reaching_90_percent_of_the_max():
    assert knee([1, 4, 8, 16, 32], [100, 300, 450, 480, 490]) == 8  # 90% of 490 = 441
    assert knee([32, 1, 16, 4, 8], [490, 100, 480, 300, 450]) == 8  # order does not matter
    assert knee([1, 4, 8], [100, 300, 440]) == 8  # still rising: the last point
    assert knee([1, 4, 8, 16], [200, 400, 390, 395]) == 4  # past the peak: where it was first reached
    assert knee([1, 2], [100, 100]) == 1  # flat: batching buys nothing
    assert knee([1, 4, 8], [100, 300, 400], fraction=0.5) == 4


def test_knee_edge_cases():
    assert knee([], []) is None
    assert knee([8], [123.0]) == 8
    assert knee([1, 4, 8], [100, math.nan, 150]) == 8  # a missing point is skipped
    assert knee([1, 4], [None, math.nan]) is None
    with pytest.raises(ValueError, match="fraction"):
        knee([1], [1], fraction=0)
    with pytest.raises(ValueError, match="differ in length"):
        knee([1, 2], [1])


# --- the page, from a real CPU-tier results file --------------------------------------------------

# Written by the real suite on the CPU tier, narrowed to stay small, then saved without indentation:
#   pytest perf_tests -m cpu --batchperf-backends=hf-static --batchperf-batch-sizes=1,4,8 --batchperf-prompt-lens=64,256
#     --batchperf-concurrency=4,8 --batchperf-num-prompts=8 --batchperf-output-lens=4,8
#     --batchperf-rounds=2 --benchmark-json=results_cpu_small.json
RESULTS = DATA / "results_cpu_small.json"
FIGURES = ("throughput.png", "latency.png", "ttft_concurrency.png", "itl.png", "kv_growth.png", "memory.png")


def _cell_ids(path: Path) -> list[str]:
    return [b["extra_info"]["cell"]["id"] for b in json.loads(path.read_text())["benchmarks"]]


def test_report_from_a_real_cpu_results_file(tmp_path):
    index = build_report([RESULTS], tmp_path / "report")
    page = index.read_text()
    for name in FIGURES:
        png = tmp_path / "report" / name
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
        assert f"src='{name}'" in page
    for cell_id in _cell_ids(RESULTS):
        assert cell_id in page
    assert "knee bs" in page
    assert '<span class="ok">agrees</span>' in page  # hf-static's KV slope is the analytic one
    assert "DIFFERS" not in page


# Engine counters: the real suite on three backends (a loaded machine: its speeds mean nothing), traces dropped:
#   pytest perf_tests -m cpu --batchperf-backends hf-static,continuous,vllm --batchperf-batch-sizes 1,4,8
#     --batchperf-prompt-lens 64,256 --batchperf-concurrency 8 --batchperf-rounds 1 --benchmark-json=...
COUNTERS = DATA / "results_cpu_counters.json"


def test_engine_counters_are_plotted_and_tabled(tmp_path):
    page = build_report([COUNTERS], tmp_path / "report").read_text()
    assert (tmp_path / "report" / "engine_counters.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "src='engine_counters.png'" in page and "preempt / round" in page
    # hf-static has no preemption counter: a dash whose tooltip says why, never a zero
    assert '<span title="static batches: generate has no scheduler, so nothing is preempted or cached">–</span>' in page


def test_results_without_counters_get_no_counter_figure_and_say_why(tmp_path):
    page = build_report([RESULTS], tmp_path / "report").read_text()
    assert not (tmp_path / "report" / "engine_counters.png").exists()
    assert "no cell has engine counters" in page


def test_two_runs_are_told_apart_by_file_name(tmp_path):
    before, after = tmp_path / "before.json", tmp_path / "after.json"
    shutil.copy(RESULTS, before)
    shutil.copy(RESULTS, after)
    page = build_report([before, after], tmp_path / "report").read_text()
    assert "before · tiny-qwen2 · hf-static" in page and "after · tiny-qwen2 · hf-static" in page
    with pytest.raises(ValueError, match="given twice"):
        build_report([before, before], tmp_path / "again")


def test_two_hosts_baselines_of_one_name_are_told_apart_by_their_folders(tmp_path):
    # baselines/<fingerprint>/baseline.json of two hosts: the folder that differs names each run
    paths = [tmp_path / "baselines" / host / "baseline.json" for host in ("cpu-amd-f25m17", "cpu-amd-f25m1")]
    for path in paths:
        path.parent.mkdir(parents=True)
        shutil.copy(RESULTS, path)
    page = build_report(paths, tmp_path / "report").read_text()
    assert "cpu-amd-f25m17/baseline · tiny-qwen2 · hf-static" in page
    assert "cpu-amd-f25m1/baseline · tiny-qwen2 · hf-static" in page


def test_a_file_without_traces_gets_no_itl_figure_and_says_why(tmp_path):
    doc = json.loads(RESULTS.read_text())
    for bench in doc["benchmarks"]:
        bench["extra_info"].pop("traces", None)
    slim = tmp_path / "slim.json"
    slim.write_text(json.dumps(doc))
    out = tmp_path / "report"
    page = build_report([slim], out).read_text()
    assert not (out / "itl.png").exists()
    assert "the cells kept no raw traces" in page


@pytest.mark.parametrize("without", ["every cell", "one cell"])
def test_cells_without_kv_tokens_held_are_left_out_of_the_kv_figure_never_a_crash(tmp_path, without):
    """A record without ``kv.kv_tokens_per_request_mean`` (a backend with no KV figures, an older record) was a
    KeyError in the KV figure, and no report at all; now the rest is drawn and the page says what was left out."""
    doc = json.loads(RESULTS.read_text())
    for bench in doc["benchmarks"] if without == "every cell" else doc["benchmarks"][:1]:
        del bench["extra_info"]["kv"]["kv_tokens_per_request_mean"]
    old = tmp_path / "old.json"
    old.write_text(json.dumps(doc))
    out = tmp_path / "report"
    page = build_report([old], out).read_text()
    for name in FIGURES:
        if name != "kv_growth.png":
            assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
    if without == "every cell":
        assert not (out / "kv_growth.png").exists()
        assert "no cell measured both its KV bytes and the tokens it held per request" in page
    else:
        assert (out / "kv_growth.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert "1 cell(s) without both KV figures" in page and "left out of the fit and the figure" in page


def test_cli(tmp_path, capsys):
    parser = argparse.ArgumentParser()
    add_cli_args(parser)
    assert main(parser.parse_args([str(RESULTS), "--out", str(tmp_path / "r")])) == 0
    assert f"wrote {tmp_path / 'r' / 'index.html'}" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="no such results file"):
        main(parser.parse_args([str(tmp_path / "nope.json"), "--out", str(tmp_path / "r")]))


def test_a_client_bound_cell_is_marked_and_its_reasons_listed(tmp_path):
    from gate_samples import CLIENT_LAG_REASON, client_bound

    doc = json.loads(RESULTS.read_text())
    first = doc["benchmarks"][0]["extra_info"]
    first["client"] = client_bound(CellRecord.from_dict(first)).client
    marked = tmp_path / "marked.json"
    marked.write_text(json.dumps(doc))
    page = build_report([marked], tmp_path / "report").read_text()
    assert page.count("CLIENT-BOUND</span>") == 1
    reason = f"{first['cell']['id']}: round 1 of 3: {CLIENT_LAG_REASON}"
    assert html.escape(reason) in page


def test_a_plot_interrupted_half_way_leaves_the_old_png_and_no_temporary(tmp_path):
    """A PNG is written whole or not at all (an interrupted report used to leave a truncated plot behind)."""
    from types import SimpleNamespace

    from batchperf.report.plots import _save

    path = tmp_path / "throughput.png"
    path.write_bytes(b"the last report's plot")

    class HalfWritten:
        def tight_layout(self):
            pass

        def savefig(self, target, **_):
            with (open(target, "wb") if isinstance(target, (str, Path)) else target) as fh:
                fh.write(b"\x89PNG half of it")
                raise KeyboardInterrupt

    closed = []
    with pytest.raises(KeyboardInterrupt):
        _save(HalfWritten(), SimpleNamespace(close=closed.append), path)
    assert path.read_bytes() == b"the last report's plot" and [p.name for p in tmp_path.iterdir()] == [path.name]
    assert len(closed) == 1  # the figure is closed all the same
