"""The phases plugin (``-p batchperf.launch.phases``): a pytest process's timestamps in order, each fixture's
seconds, and nothing written without ``BATCHPERF_PHASES``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from paths import REPO

TESTS = """
import time
import pytest

@pytest.fixture
def slow_fixture():
    time.sleep(0.3)

def test_one(slow_fixture):
    time.sleep(0.2)
"""


def run(tmp_path: Path, target: Path | None) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_x.py").write_text(TESTS)
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    env.pop("BATCHPERF_PHASES", None)
    if target is not None:
        env["BATCHPERF_PHASES"] = str(target)
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "batchperf.launch.phases", "-q", "-p",
                           "no:cacheprovider", "test_x.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120, check=False)


def test_the_phases_come_in_order_with_each_fixture_s_seconds(tmp_path: Path) -> None:
    target = tmp_path / "phases.json"
    done = run(tmp_path, target)
    assert done.returncode == 0, done.stdout + done.stderr
    ph = json.loads(target.read_text())
    (test,) = ph["tests"]
    order = [ph["process_start"], ph["plugin_imported"], ph["configured"], ph["collection_start"],
             ph["collection_finish"], test["setup_start"], test["setup_end"], test["call_start"], test["call_end"],
             test["teardown_end"], ph["unconfigure"]]
    assert order == sorted(order), order
    assert test["fixtures"]["slow_fixture"] >= 0.3 and test["setup_end"] - test["setup_start"] >= 0.3
    assert test["call_end"] - test["call_start"] >= 0.2 and ph["collected"] == 1
    assert test["nodeid"] == "test_x.py::test_one"


def test_without_the_variable_it_writes_nothing(tmp_path: Path) -> None:
    done = run(tmp_path, None)
    assert done.returncode == 0 and not list(tmp_path.glob("*.json"))
