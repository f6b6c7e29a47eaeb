"""`batchperf refresh` and the baseline store: what it writes, what it refuses, and every bad input."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from gate_samples import CPU_FP, GPU_FP, cell_info, results_file, scaled
from refresh_samples import A, B, run  # its fixtures folder and pinned come through conftest.py

from batchperf.cli import refresh as cli_refresh
from batchperf.regress import store as baseline_store
from batchperf.regress.refresh import RefreshRequest
from batchperf.regress.store import BASELINE_FILE, HISTORY_FILE, load_baseline, locked, provenance_of, read_history
from batchperf.results import io as results_io
from batchperf.results.record import ResultsError


def test_first_refresh_writes_a_baseline_pytest_benchmark_can_read(tmp_path: Path, pinned: Path) -> None:
    data = json.loads(pinned.read_text())
    umask = os.umask(0)
    os.umask(umask)
    assert pinned.stat().st_mode & 0o777 == 0o666 & ~umask  # readable by others: it gets committed
    assert data["batchperf_baseline"]["schema"] == 1
    assert data["batchperf_baseline"]["fingerprint"]["key"] == CPU_FP.key
    prov = data["batchperf_baseline"]["provenance"]
    assert prov["results"] == [{"file": str(tmp_path / "r0.json"),
                                "sha256": hashlib.sha256((tmp_path / "r0.json").read_bytes()).hexdigest()}]
    assert prov["reason"] == "initial baseline" and prov["cells"] == [A, B] and prov["user"]
    assert prov["versions"] == CPU_FP.upgrade and prov["results_commit"]["id"] == "c0ffee"
    assert all("traces" not in b["extra_info"] and len(b["extra_info"]["rounds"]) == 3 for b in data["benchmarks"])
    assert [h["id"] for h in read_history(pinned.parent)] == [prov["id"]]
    out = subprocess.run([sys.executable, "-m", "pytest_benchmark", "compare", str(pinned)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "test_cell[" + A + "]" in out.stdout


def test_a_regression_is_refused_unless_accepted_with_a_reason(tmp_path: Path, pinned: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    before = pinned.read_bytes()
    slow = results_file(tmp_path / "slow.json", [scaled(cell_info(A), 3.0), cell_info(B)])
    assert run(tmp_path, slow, "--reason", "try") == 2
    out = capsys.readouterr().out
    assert "refresh refused; nothing was written" in out and f"regressed against the current baseline: {A}" in out
    assert pinned.read_bytes() == before
    with pytest.raises(SystemExit, match="--accept-regression needs --reason"):
        run(tmp_path, slow, "--accept-regression")
    assert run(tmp_path, slow, "--accept-regression", "--reason", "torch 2.14 is slower; accepted") == 0
    history = read_history(pinned.parent)
    assert len(history) == 2 and history[-1]["accepted_regressions"] == [A]
    assert history[-1]["reason"] == "torch 2.14 is slower; accepted"
    assert load_baseline(pinned).cells[f"perf_tests/test_cells.py::test_cell[{A}]"].metrics[
        "output_throughput"] == pytest.approx(100 / 3.0)


def test_replacing_needs_a_reason_and_an_improvement_passes_with_one(tmp_path: Path, pinned: Path) -> None:
    fast = results_file(tmp_path / "fast.json", [scaled(cell_info(A), 0.5), cell_info(B)])
    assert run(tmp_path, fast) == 2
    assert run(tmp_path, fast, "--reason", "faster scheduler") == 0


def test_failed_cells_are_refused_or_left_out(tmp_path: Path, pinned: Path) -> None:
    bad = cell_info(A)
    bad.token_count_errors = ["request 3: generated 15 tokens, target 16"]
    res = results_file(tmp_path / "f.json", [bad, scaled(cell_info(B), 0.9)])
    before = pinned.read_bytes()
    assert run(tmp_path, res, "--reason", "x") == 2
    assert pinned.read_bytes() == before
    assert run(tmp_path, res, "--reason", "x", "--allow-failed") == 0
    history = read_history(pinned.parent)[-1]
    assert history["cells"] == [B] and history["left_out_failed"] == [A]
    assert f"perf_tests/test_cells.py::test_cell[{A}]" in load_baseline(pinned).cells  # old entry kept


def test_a_void_gpu_cell_is_never_pinned(tmp_path: Path, pinned: Path) -> None:
    """A cell whose GPU did not hold its clocks measured the card: refused like a failed cell, or left out."""
    hot = cell_info(A)
    hot.telemetry.update(nvml="ok", throttle_reasons=["hw_thermal_slowdown"])
    res = results_file(tmp_path / "f.json", [hot, scaled(cell_info(B), 0.9)])
    before = pinned.read_bytes()
    assert run(tmp_path, res, "--reason", "x") == 2
    assert pinned.read_bytes() == before
    assert run(tmp_path, res, "--reason", "x", "--allow-failed") == 0
    assert read_history(pinned.parent)[-1]["left_out_failed"] == [A]


def test_a_client_bound_cell_is_pinned_with_a_warning_that_names_it_and_the_history_records_it(
        tmp_path: Path, pinned: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Its latencies are the client's: pinned, the gate leaves them not judged until the next refresh. Not a refusal
    (the gate never passes them), but the person refreshing must see it."""
    lagged = cell_info(A)
    lagged.client = {"client_bound": True, "reasons": ["event loop lag p99 26.8 ms"], "server_saturated": False}
    capsys.readouterr()
    assert run(tmp_path, results_file(tmp_path / "c.json", [lagged, cell_info(B)]), "--reason", "x") == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "warning: 1 cell(s) were client-bound" in out
    assert f"- {A}: client-bound (these results): event loop lag p99 26.8 ms" in out and f"- {B}" not in out
    assert read_history(pinned.parent)[-1]["client_bound"] == [A]
    assert run(tmp_path, results_file(tmp_path / "d.json", [cell_info(A), cell_info(B)]), "--reason", "y") == 0
    assert "were client-bound" not in capsys.readouterr().out and "client_bound" not in read_history(pinned.parent)[-1]


def test_dirty_tree_and_incomplete_runs_are_refused_unless_told(tmp_path: Path, pinned: Path) -> None:
    dirty = results_file(tmp_path / "d.json", [cell_info(A), cell_info(B)], dirty=True)
    assert run(tmp_path, dirty, "--reason", "x") == 2
    assert run(tmp_path, dirty, "--reason", "x", "--allow-dirty") == 0
    only_a = results_file(tmp_path / "a.json", [cell_info(A)])
    assert run(tmp_path, only_a, "--reason", "x") == 2
    assert run(tmp_path, only_a, "--reason", "x", "--partial") == 0
    assert len(load_baseline(pinned).cells) == 2
    assert run(tmp_path, only_a, "--reason", "x", "--cells", "*bs4*") == 0  # a selection is partial on purpose


def test_dry_run_writes_nothing(tmp_path: Path, folder: Path) -> None:
    assert run(tmp_path, results_file(tmp_path / "r.json", [cell_info(A)]), "--dry-run") == 0
    assert not (folder / BASELINE_FILE).exists()


# --- bad input: each names the file, the problem and the way out; nothing is lost ----------------


def test_corrupt_baseline(tmp_path: Path, pinned: Path) -> None:
    pinned.write_text('{"benchmarks": [')
    with pytest.raises(SystemExit) as exc:
        run(tmp_path, results_file(tmp_path / "r.json", [cell_info(A), cell_info(B)]), "--reason", "x")
    msg = str(exc.value)
    assert str(pinned) in msg and "not valid JSON" in msg and "git checkout" in msg
    assert pinned.read_text() == '{"benchmarks": ['  # left for the user to restore, not overwritten


def test_unknown_schema_version(tmp_path: Path, pinned: Path) -> None:
    data = json.loads(pinned.read_text())
    data["batchperf_baseline"]["schema"] = 99
    pinned.write_text(json.dumps(data))
    with pytest.raises(ResultsError, match="baseline schema 99; this batchperf reads schema 1") as exc:
        load_baseline(pinned)
    assert "batchperf refresh" in exc.value.fix


def test_baseline_from_other_hardware(tmp_path: Path, pinned: Path) -> None:
    with pytest.raises(ResultsError, match="was made on other hardware") as exc:
        load_baseline(pinned, GPU_FP)
    assert "NVIDIA H200" in str(exc.value) and GPU_FP.key in exc.value.fix
    # and a baseline copied into the wrong folder is refused by the refresh too
    wrong = tmp_path / "baselines" / GPU_FP.key
    wrong.mkdir(parents=True)
    (wrong / BASELINE_FILE).write_bytes(pinned.read_bytes())
    with pytest.raises(SystemExit, match="other hardware"):
        run(tmp_path, results_file(tmp_path / "g.json", [cell_info(A)], fp=GPU_FP), "--reason", "x")


def test_results_missing_fields(tmp_path: Path) -> None:
    res = results_file(tmp_path / "m.json", [cell_info(A), cell_info(B)])
    data = json.loads(res.read_text())
    del data["benchmarks"][0]["extra_info"]["metrics"]
    res.write_text(json.dumps(data))
    with pytest.raises(SystemExit) as exc:
        run(tmp_path, res)
    assert str(res) in str(exc.value) and f"test_cell[{A}]: missing metrics in extra_info" in str(exc.value)
    no_fp = results_file(tmp_path / "n.json", [cell_info(A)], fp=None)
    with pytest.raises(SystemExit, match="no batchperf fingerprint"):
        run(tmp_path, no_fp)
    (tmp_path / "x.json").write_text("[1, 2]")
    with pytest.raises(SystemExit, match="not a pytest-benchmark results file"):
        run(tmp_path, tmp_path / "x.json")


def test_interrupted_write_keeps_the_old_baseline(tmp_path: Path, pinned: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    before = pinned.read_bytes()

    def interrupted(src: str, dst: str) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(results_io.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, results_file(tmp_path / "r.json", [scaled(cell_info(A), 0.5), cell_info(B)]), "--reason", "x")
    assert pinned.read_bytes() == before
    assert list(pinned.parent.glob(".*.tmp")) == []
    assert len(read_history(pinned.parent)) == 1


def test_a_killed_refresh_is_cleaned_up_and_its_history_repaired(tmp_path: Path, pinned: Path,
                                                                  monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    # SIGKILL during the write leaves a temporary file; a crash after the rename leaves the history short.
    (pinned.parent / f".{BASELINE_FILE}.abc123.tmp").write_text('{"half": ')

    def crash(folder: Path, provenance: dict) -> None:
        raise OSError("disk gone")

    with monkeypatch.context() as m:
        m.setattr(baseline_store, "append_history", crash)
        with pytest.raises(OSError):
            run(tmp_path, results_file(tmp_path / "r.json", [scaled(cell_info(A), 0.5), cell_info(B)]), "--reason", "x")
    new_id = provenance_of(load_baseline(pinned))["id"]
    assert new_id not in [h["id"] for h in read_history(pinned.parent)]
    assert run(tmp_path, results_file(tmp_path / "r2.json", [scaled(cell_info(A), 0.5), cell_info(B)]),
               "--reason", "y") == 0
    out = capsys.readouterr().out
    assert "left by an interrupted refresh" in out and "history was missing" in out
    ids = [h["id"] for h in read_history(pinned.parent)]
    assert new_id in ids and len(ids) == 3
    assert list(pinned.parent.glob(".*.tmp")) == []


def test_two_refreshes_cannot_interleave(tmp_path: Path, pinned: Path) -> None:
    before = pinned.read_bytes()
    with locked(pinned.parent):
        with pytest.raises(SystemExit, match="another baseline refresh holds the lock"):
            run(tmp_path, results_file(tmp_path / "r.json", [cell_info(A), cell_info(B)]), "--reason", "x")
    assert pinned.read_bytes() == before
    assert run(tmp_path, results_file(tmp_path / "r.json", [cell_info(A), cell_info(B)]), "--reason", "x") == 0


def test_history_with_a_torn_last_line_still_reads_and_appends(tmp_path: Path, pinned: Path) -> None:
    with open(pinned.parent / HISTORY_FILE, "a") as fh:
        fh.write('{"id": "torn')
    assert len(read_history(pinned.parent)) == 1
    assert run(tmp_path, results_file(tmp_path / "r.json", [cell_info(A), cell_info(B)]), "--reason", "x") == 0
    assert len(read_history(pinned.parent)) == 2


def test_several_runs_are_pooled_so_the_baseline_carries_their_spread(tmp_path: Path, folder: Path) -> None:
    fast, slow = scaled(cell_info(A, spread=0.0), 0.8), scaled(cell_info(A, spread=0.0), 1.25)
    files = [results_file(tmp_path / f"r{i}.json", [info]) for i, info in enumerate((cell_info(A, spread=0.0), fast, slow))]
    assert run(tmp_path, files) == 0
    stored = load_baseline(folder / BASELINE_FILE)
    info = next(iter(stored.cells.values()))
    assert info.pooled_runs == 3 and len(info.rounds) == 9
    assert info.metrics["output_throughput"] == pytest.approx(100.0)  # the median of 80, 100, 125 (×3 each)
    assert [r["sha256"] for r in provenance_of(stored)["results"]] == [
        hashlib.sha256(f.read_bytes()).hexdigest() for f in files]
    from batchperf.regress.gate import relative_spread

    assert relative_spread(info, "metrics.output_throughput") > 0.15  # the run-to-run spread, now in the baseline


def test_runs_of_other_versions_or_cells_are_not_pooled(tmp_path: Path) -> None:
    from batchperf.regress.fingerprint import Fingerprint

    newer = Fingerprint(CPU_FP.identity, {**CPU_FP.upgrade, "torch": "9.0"}, CPU_FP.soft)
    a = results_file(tmp_path / "a.json", [cell_info(A)])
    b = results_file(tmp_path / "b.json", [cell_info(A)], fp=newer)
    with pytest.raises(SystemExit, match=r"b.json: cannot be pooled with .*a.json: torch: 2.13.0 → 9.0"):
        run(tmp_path, [a, b])
    other = cell_info(A)
    other.cell["seed"] = 7
    c = results_file(tmp_path / "c.json", [other])
    with pytest.raises(SystemExit, match=r"c.json: .*differs from the other runs: seed: 0 → 7"):
        run(tmp_path, [a, c])


@pytest.mark.parametrize(("fields", "named"), [
    ({"accept_regression": True}, "accept_regression needs a reason"),
    ({"cells": "cpu-*"}, "cells must be a tuple"),  # a bare string would be one glob per character
    ({"tolerances": ["p99_e2el_ms=0.3"]}, "tolerances must be a tuple"),
    ({"baselines": "baselines"}, "baselines must be a Path"),
])
def test_a_refresh_request_names_its_bad_field(fields: dict, named: str) -> None:
    with pytest.raises(ValueError, match=named):
        RefreshRequest(**fields)


def test_the_cli_hands_the_logic_a_request_not_its_parsed_args(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[object] = []
    monkeypatch.setattr(cli_refresh, "refresh", lambda request, paths, console: seen.append(request) or 0)
    assert run(tmp_path, tmp_path / "r.json", "--reason", "why", "--cells", "cpu-*", "--accept-regression",
               "--partial", "--batchperf-k", "4", "--batchperf-tolerance", "p99_e2el_ms=0.3") == 0
    assert seen == [RefreshRequest(baselines=tmp_path / "baselines", reason="why", cells=("cpu-*",),
                                   accept_regression=True, partial=True, k=4.0, tolerances=("p99_e2el_ms=0.3",))]
