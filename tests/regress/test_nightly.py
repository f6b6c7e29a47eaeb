"""The nightly path end to end on the CPU tier (ci/nightly.sh), its helpers, and the workflow's schema."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

import gate_samples
import pytest
from gate_samples import CPU_FP
from paths import REPO

from batchperf.regress.fingerprint import Fingerprint
from batchperf.regress.nightly import baseline_path, confirmed_regressions, history_name
from batchperf.results.io import ResultsFile, read_results
from batchperf.results.record import CellRecord

NARROW = ["--batchperf-backends=hf-static", "--batchperf-batch-sizes=2", "--batchperf-prompt-lens=8", "--batchperf-concurrency=1,2",
          "--batchperf-num-prompts=3", "--batchperf-rounds=1", "--batchperf-output-lens=2,3"]


def nightly(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(REPO / "ci" / "nightly.sh"), "--python", sys.executable, *args],
                          capture_output=True, text=True, cwd=REPO, timeout=600,
                          env={**os.environ, **(env or {})})


@pytest.fixture(scope="module")
def night(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One nightly run of the narrowed CPU tier (about 40 s on 2 busy cores), shared by the tests below."""
    root = tmp_path_factory.mktemp("nightly")
    run = nightly("--tier", "cpu", "--out", str(root / "out"), "--history", str(root / "history"), "--", *NARROW,
                  env={"GITHUB_STEP_SUMMARY": str(root / "summary.md")})
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return root


@pytest.mark.slow
def test_cpu_nightly_produces_every_artifact(night: Path) -> None:
    out, history, summary = night / "out", night / "history", night / "summary.md"
    assert json.loads((out / "gpu-health.json").read_text())["reason"].startswith("no GPU")
    results = json.loads((out / "results.json").read_text())
    assert sorted(b["extra_info"]["cell"]["id"] for b in results["benchmarks"]) == [
        "cpu-tiny-qwen2-hf-static-bs2-p8-c1", "cpu-tiny-qwen2-hf-static-bs2-p8-c2"]
    suite = ElementTree.parse(out / "junit.xml").getroot().find("testsuite")
    assert suite is not None and suite.get("name") == "batchperf-cpu"
    assert suite.get("failures") == suite.get("errors") == "0"
    cases = {c.get("name") for c in suite.iter("testcase")}
    assert {"test_cell[cpu-tiny-qwen2-hf-static-bs2-p8-c1]", "test_cell[cpu-tiny-qwen2-hf-static-bs2-p8-c2]"} <= cases
    assert " passed" in (out / "pytest.log").read_text() and " failed" not in (out / "pytest.log").read_text()
    entries = list(history.glob("*-cpu.json"))
    assert len(entries) == 1 and json.loads(entries[0].read_text()) == results
    assert "1 run(s) in" in (out / "history.md").read_text()
    assert summary.read_text().endswith((out / "history.md").read_text())
    assert (out / "report" / "index.html").is_file()
    # no baseline pinned for this machine in a fresh checkout: said so
    assert "no baseline" in (out / "comparison.md").read_text()
    assert summary.read_text().startswith((out / "comparison.md").read_text())


@pytest.mark.slow
def test_merged_night_is_compared_with_the_pinned_baseline(night: Path) -> None:
    baselines, results = night / "baselines", night / "out" / "results.json"
    pin = subprocess.run([sys.executable, "-m", "batchperf.cli", "refresh", str(results), "--baselines",
                          str(baselines), "--reason", "test", "--allow-dirty"], capture_output=True, text=True,
                         cwd=REPO, timeout=120)
    assert pin.returncode == 0, pin.stdout + pin.stderr
    out = night / "merged"
    run = nightly("--tier", "cpu", "--merge", str(results), "--out", str(out), "--history", str(night / "history"),
                  "--baselines", str(baselines), env={"GITHUB_STEP_SUMMARY": str(night / "summary2.md")})
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    comparison = (out / "comparison.md").read_text()
    assert "**2** no change" in comparison and "cpu-tiny-qwen2-hf-static-bs2-p8-c2" in comparison
    assert (night / "summary2.md").read_text().startswith(comparison)
    assert len(list((night / "history").glob("*.json"))) == 1  # the same run appended twice is one entry


def test_bad_arguments_are_refused() -> None:
    run = nightly("--tier", "tpu")
    assert run.returncode == 2 and "--tier must be cpu or gpu, not 'tpu'" in run.stderr
    run = nightly("--shard", "1/2", "--merge", "a.json")
    assert run.returncode == 2 and "--shard and --merge exclude each other" in run.stderr


def results(tmp_path: Path, name: str, records: list | None = None, fp: Fingerprint | None = CPU_FP,
            when: str = "2026-01-01T00:00:00", commit: str = "c0ffee") -> ResultsFile:
    path = gate_samples.results_file(tmp_path / f"{name}.json", records or [gate_samples.cell_info()], fp=fp)
    data = json.loads(path.read_text())
    data["datetime"], data["commit_info"]["id"] = when, commit
    path.write_text(json.dumps(data))
    return read_results(path)


def test_history_names_sort_in_run_order(tmp_path: Path) -> None:
    a = history_name(results(tmp_path, "a", when="2026-01-02T02:17:00.123+00:00", commit="abcdef1234567890"), "gpu")
    b = history_name(results(tmp_path, "b", when="2026-01-10T02:17:00", commit="0000"), "gpu")
    assert a == "20260102T021700-abcdef123456-gpu.json" and sorted([b, a]) == [a, b]


def test_baseline_path_comes_from_the_fingerprint(tmp_path: Path) -> None:
    assert baseline_path(results(tmp_path, "a"), tmp_path) == tmp_path / CPU_FP.key / "baseline.json"
    with pytest.raises(SystemExit, match="no fingerprint"):
        baseline_path(results(tmp_path, "b", fp=None), tmp_path)


def test_confirmed_regressions_come_from_the_gate_verdicts(tmp_path: Path) -> None:
    def cell(name: str, gate: dict | None) -> CellRecord:
        record = gate_samples.cell_info(name)
        record.gate = gate
        return record

    found = results(tmp_path, "r", [cell("a", {"verdict": "regression", "regressed": ["p99_e2el_ms"]}),
                                    cell("b", {"verdict": "pass"}), cell("c", None),
                                    cell("d", {"verdict": "improvement"})])
    assert confirmed_regressions(found) == ["a: regression (p99_e2el_ms)"]


WORKFLOW = REPO / "ci" / "workflows" / "nightly.yml"


def check_jsonschema() -> str:
    exe = shutil.which("check-jsonschema") or str(Path(sys.executable).with_name("check-jsonschema"))
    if not Path(exe).exists():
        pytest.skip("check-jsonschema is not installed (pip install -e '.[test]')")
    return exe


def test_workflow_matches_githubs_schema() -> None:
    run = subprocess.run([check_jsonschema(), "--builtin-schema", "vendor.github-workflows", str(WORKFLOW)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr


def test_schema_check_catches_a_broken_workflow(tmp_path: Path) -> None:
    broken = tmp_path / "nightly.yml"
    broken.write_text(WORKFLOW.read_text().replace("runs-on: [self-hosted, gpu]", "runs_on: [self-hosted, gpu]", 1))
    run = subprocess.run([check_jsonschema(), "--builtin-schema", "vendor.github-workflows", str(broken)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 1 and "runs_on" in run.stdout


def test_workflow_runs_on_a_self_hosted_gpu_runner_nightly_and_by_hand() -> None:
    text = WORKFLOW.read_text()
    assert "runs-on: [self-hosted, gpu]" in text and "schedule:" in text and "workflow_dispatch:" in text
    assert "ci/nightly.sh --tier gpu --gpus all --shard" in text and "ci/nightly.sh --tier gpu --merge" in text
    assert "BATCHPERF_PUSHGATEWAY: ${{ vars.BATCHPERF_PUSHGATEWAY }}" in text  # the merge step can push
