"""`batchperf refresh --run` stopped from outside: SIGTERM/SIGINT stop the pytest it runs (its whole process group),
nothing is written, and it exits 143/130; SIGKILL leaves no pytest running either."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from hanging_child import alive, all_gone, hanging_script, read_pids
from paths import REPO


def start_refresh(tmp_path: Path) -> tuple[subprocess.Popen[str], list[int]]:
    hanging_script(tmp_path / "pytest.py", tmp_path / "pids")  # `python -m pytest` in tmp_path runs it
    proc = subprocess.Popen([sys.executable, "-m", "batchperf.cli", "refresh", "--baselines", str(tmp_path / "b"),
                             "--run", "-q"], cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO / "src")},
                            stderr=subprocess.PIPE, text=True)
    return proc, read_pids(tmp_path / "pids")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_stops_the_pytest_it_runs(tmp_path: Path, sig: signal.Signals) -> None:
    proc, pids = start_refresh(tmp_path)
    assert all(alive(p) for p in pids)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + sig, err
    assert "interrupted while pytest ran" in err and "Traceback" not in err
    assert all_gone(pids)  # it used to keep running after refresh was gone
    assert not (tmp_path / "b").exists()


def test_sigkill_of_refresh_leaves_no_pytest_running(tmp_path: Path) -> None:
    proc, pids = start_refresh(tmp_path)
    proc.kill()
    proc.communicate(timeout=120)
    assert all_gone(pids)
