"""Shards run through the real suite and merged give the same cells as one run; merge refuses bad input."""

import argparse
import json
from pathlib import Path

import pytest
from gate_samples import CPU_FP, GPU_FP, bench, cell_info

from batchperf.cli.merge import main
from batchperf.regress.fingerprint import Fingerprint, HardwareIdentity
from batchperf.results.io import read_results
from batchperf.results.merge import merge_results
from batchperf.results.record import ResultsError

# Two cells: bs2-p8-c1 hashes to shard 1 of 2, bs2-p8-c2 to shard 2.
SMALL = ["-m", "cpu", "--batchperf-backends=hf-static", "--batchperf-batch-sizes=2", "--batchperf-prompt-lens=8",
         "--batchperf-concurrency=1,2",
         "--batchperf-num-prompts=3", "--batchperf-rounds=1", "--batchperf-output-lens=2,3", "-p", "no:cacheprovider"]


def cell_ids(path: Path) -> list[str]:
    return sorted(c.id for c in read_results(path).records)


def test_two_shards_merged_give_the_same_cells_as_one_run(suite: pytest.Pytester, tmp_path: Path) -> None:
    whole = tmp_path / "whole.json"
    suite.runpytest(*SMALL, f"--benchmark-json={whole}").assert_outcomes(passed=3)  # and the KV check
    parts = []
    for i in (1, 2):
        part = tmp_path / f"shard{i}.json"
        result = suite.runpytest(*SMALL, f"--batchperf-shard={i}/2", f"--benchmark-json={part}")
        outcomes = result.parseoutcomes()  # the gpu tier's cells are deselected by -m too
        assert outcomes["passed"] == 1 and "failed" not in outcomes and "errors" not in outcomes
        result.stdout.fnmatch_lines([f"batchperf: shard {i}/2 *"])
        parts.append(part)
    assert cell_ids(parts[0]) != cell_ids(parts[1])
    merged = tmp_path / "merged.json"
    assert main(argparse.Namespace(shards=parts, out=merged)) == 0
    assert cell_ids(merged) == cell_ids(whole) == ["cpu-tiny-qwen2-hf-static-bs2-p8-c1",
                                                   "cpu-tiny-qwen2-hf-static-bs2-p8-c2"]
    data = json.loads(merged.read_text())
    assert [s["file"] for s in data["machine_info"]["batchperf_shards"]] == ["shard1.json", "shard2.json"]
    assert all(b["stats"]["rounds"] == 1 for b in data["benchmarks"])  # pytest-benchmark's own stats kept


def test_bad_shard_option_is_a_usage_error(suite: pytest.Pytester) -> None:
    result = suite.runpytest(*SMALL, "--batchperf-shard=3/2")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--batchperf-shard: bad shard '3/2': shard index must be between 1 and 2, got 3*"])


def results_file(path: Path, cells: list[str], *, commit: str = "abc", fingerprint: Fingerprint | None = None,
                 machine: str = "x86_64", when: str = "2026-01-01T00:00:00") -> Path:
    machine_info: dict = {"machine": machine, "processor": "x86_64", "python_implementation": "CPython",
                          "python_version": "3.12.0", "node": path.stem}
    if fingerprint:
        machine_info["batchperf"] = fingerprint.to_dict()
    path.write_text(json.dumps({
        "machine_info": machine_info, "commit_info": {"id": commit}, "datetime": when, "version": "5.1.0",
        "benchmarks": [bench(cell_info(c)) for c in cells],
    }))
    return path


def test_duplicated_cell_is_refused(tmp_path: Path) -> None:
    a = results_file(tmp_path / "a.json", ["c1", "c2"])
    b = results_file(tmp_path / "b.json", ["c2"])
    with pytest.raises(ResultsError, match=r"b.json: cell c2 is also in .*a.json"):
        merge_results([a, b])


def test_other_hardware_and_other_thread_counts_are_refused(tmp_path: Path) -> None:
    a = results_file(tmp_path / "a.json", ["c1"], fingerprint=CPU_FP)
    b = results_file(tmp_path / "b.json", ["c2"], fingerprint=GPU_FP)
    with pytest.raises(ResultsError, match="another machine or software.*identity"):
        merge_results([a, b])
    threads = HardwareIdentity(CPU_FP.identity.arch, CPU_FP.identity.cpu_model, CPU_FP.identity.cpu_cores,
                               cpu_threads=2)
    c = results_file(tmp_path / "c.json", ["c2"], fingerprint=Fingerprint(threads, CPU_FP.upgrade, CPU_FP.soft))
    assert threads.key == CPU_FP.key  # the same baseline folder, yet measured with another thread count
    with pytest.raises(ResultsError, match="cpu_threads"):
        merge_results([a, c])


def test_other_machine_without_fingerprint_and_other_commit_are_refused(tmp_path: Path) -> None:
    a = results_file(tmp_path / "a.json", ["c1"])
    with pytest.raises(ResultsError, match="machine: 'x86_64' vs 'aarch64'"):
        merge_results([a, results_file(tmp_path / "b.json", ["c2"], machine="aarch64")])
    with pytest.raises(ResultsError, match="is from commit def, .*a.json from abc"):
        merge_results([a, results_file(tmp_path / "c.json", ["c2"], commit="def")])


def test_merge_keeps_the_latest_time_and_all_cells(tmp_path: Path) -> None:
    a = results_file(tmp_path / "a.json", ["c2"], fingerprint=CPU_FP, when="2026-01-01T01:00:00")
    b = results_file(tmp_path / "b.json", ["c1"], fingerprint=CPU_FP, when="2026-01-01T02:00:00")
    header, entries = merge_results([a, b])
    assert header["datetime"] == "2026-01-01T02:00:00"
    assert sorted(x["extra_info"]["cell"]["id"] for x in entries) == ["c1", "c2"]


def test_unreadable_or_empty_shard_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{ truncated")
    with pytest.raises(ResultsError, match="bad.json: not valid JSON"):
        merge_results([bad])
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"machine_info": {}, "commit_info": {}, "benchmarks": []}))
    with pytest.raises(ResultsError, match="empty.json: no batchperf cells"):
        merge_results([results_file(tmp_path / "a.json", ["c1"]), empty])
    with pytest.raises(SystemExit, match="batchperf merge: .*missing.json: no such results file"):
        main(argparse.Namespace(shards=[tmp_path / "missing.json"], out=tmp_path / "out.json"))
