"""Readers of results never load the measuring stack: each reader command runs with torch, transformers,
vLLM, the backends, the engine and the suite blocked, on a results file from a real CPU-tier run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from paths import DATA, REPO

REAL = DATA / "results_cpu_small.json"
BLOCKED = ("torch", "transformers", "vllm", "batchperf.backends", "batchperf.engine", "batchperf.suite")

RUNNER = f"""
import importlib.abc, sys

class Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if any(name == b or name.startswith(b + ".") for b in {BLOCKED!r}):
            raise ImportError(f"blocked for this test: {{name}}")
        return None

sys.meta_path.insert(0, Blocked())
if sys.argv[1] == "nightly":
    from batchperf.regress.nightly import main
    sys.exit(main(sys.argv[2:]))
if sys.argv[1] == "gpu_check":
    from batchperf.report.gpu_check import main
    sys.exit(main(sys.argv[2:]))
from batchperf.cli import main
code = main(sys.argv[1:])
assert not [m for m in sys.modules if m.split(".")[0] in ("torch", "transformers", "vllm")], "heavy import"
sys.exit(code)
"""


def reader(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    return subprocess.run([sys.executable, "-c", RUNNER, *args], capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=300)


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("readers")
    data = json.loads(REAL.read_text())
    # a second run of the same cells, for compare/history, and two shards for merge
    (folder / "a.json").write_text(json.dumps(data))
    (folder / "b.json").write_text(json.dumps({**data, "datetime": "2099-01-01T00:00:00"}))
    half = len(data["benchmarks"]) // 2
    (folder / "s1.json").write_text(json.dumps({**data, "benchmarks": data["benchmarks"][:half]}))
    (folder / "s2.json").write_text(json.dumps({**data, "benchmarks": data["benchmarks"][half:]}))
    return folder


@pytest.mark.parametrize("args", [
    ["compare", "a.json", "b.json", "--markdown", "cmp.md"],
    ["report", "a.json", "--out", "report"],
    ["recommend", "a.json", "--p99-e2el-ms", "100000"],
    ["merge", "s1.json", "s2.json", "--out", "merged.json"],
    ["refresh", "a.json", "--baselines", "bl", "--dry-run", "--allow-dirty"],
    ["history", "."],
    ["export", "a.json", "--out", "a.om", "--history", "."],
    ["nightly", "confirmed-regressions", "a.json"],
    ["nightly", "history-name", "a.json", "cpu"],
    ["gpu_check", "a.json", "b.json", "--out", "summary.txt"],
])
def test_reader_runs_without_the_measuring_stack(work: Path, args: list[str]) -> None:
    done = reader(*args, cwd=work)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "blocked for this test" not in done.stderr


def test_the_blocker_works(work: Path) -> None:
    done = reader("models", cwd=work)  # lists backends and models: it may import them, so here it must fail
    assert done.returncode != 0 and "blocked for this test" in done.stderr
