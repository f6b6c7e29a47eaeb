"""A/B's pytest processes end with os._exit once pytest is done (``launch.suite.QUICK_EXIT``): the interpreter's teardown, seconds
of finalising torch and transformers, is skipped; pytest's exit code, outcomes and files are what they were."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from paths import REPO

from batchperf.ab.designs import run_cells
from batchperf.ab.env import Environment

TESTS = """
import atexit, os

def test_passes():
    atexit.register(lambda: open(os.environ["TEARDOWN_MARK"], "w").write("the interpreter's teardown ran"))

def test_fails():
    assert 1 == 2, "fails on purpose"
"""


def test_the_child_skips_the_interpreter_teardown_and_keeps_its_exit_code(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    checkout = tmp_path / "checkout"
    (checkout / "perf_tests").mkdir(parents=True)
    (checkout / "perf_tests" / "test_plain.py").write_text(TESTS)
    monkeypatch.setenv("PYTHONPATH", str(REPO / "src"))  # this tree's plugins (the child runs in the checkout)
    mark = tmp_path / "teardown-ran"
    env = Environment("A", Path(sys.executable), (("TEARDOWN_MARK", str(mark)),), checkout)
    done = run_cells(env, [], tmp_path / "run")
    assert done.returncode == 1  # a failing test: pytest's own exit code, not os._exit's default
    assert sorted(o.status for o in done.outcomes.values()) == ["failed", "passed"]
    log = done.log.read_text()
    assert "1 failed, 1 passed" in log  # pytest's summary reached the log before the exit
    assert "RemovedIn10Warning" not in log  # pytest.main(), not console_main (deprecated in 9.1, gone in 10)
    assert not mark.exists(), "the interpreter's teardown (atexit) ran: the quick exit did not happen"
