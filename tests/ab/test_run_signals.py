"""`batchperf ab` stopped from outside, with real processes: SIGTERM/SIGINT stop the running pytest's whole group,
write the final ab.json and exit 143/130; SIGKILL leaves no pytest running; a hanging process is timed out."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from ab_fakes import CELLS, FakeEnvs
from hanging_child import alive, all_gone, hanging_script, read_pids
from paths import REPO, SUPPORT

from batchperf.ab.env import Environment
from batchperf.ab.run import run_ab
from batchperf.ab.settings import Settings

DOCUMENTED = {0, 1, 2, 3, 4, 130, 143}  # docs/ab.md, "Exit codes"

# ab with fake probes and cells, but real pytest processes: `python -m pytest` in a folder whose pytest.py hangs
AB = textwrap.dedent("""
    import sys
    from pathlib import Path
    from ab_fakes import CELLS, FakeEnvs
    from batchperf.ab.env import Environment
    from batchperf.ab.run import run_ab
    from batchperf.ab.settings import Settings
    fakes = FakeEnvs(cells=CELLS[:1])
    env = lambda label: Environment(label, Path(sys.executable), dir=Path(sys.argv[1]))
    s = Settings(env("A"), env("B"), (), Path(sys.argv[2]), max_pairs=12, max_minutes=None,
                 design="sequential")
    sys.exit(run_ab(s, prober=fakes.probe, collector=fakes.collect).exit_code)
""")


def start_ab(tmp_path: Path) -> tuple[subprocess.Popen[bytes], list[int]]:
    (tmp_path / "env").mkdir()
    hanging_script(tmp_path / "env" / "pytest.py", tmp_path / "pids")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(SUPPORT)])}
    proc = subprocess.Popen([sys.executable, "-c", AB, str(tmp_path / "env"), str(tmp_path / "out")], env=env)
    return proc, read_pids(tmp_path / "pids")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_stops_the_running_pytest_and_ends_ab_json(tmp_path: Path, sig: signal.Signals) -> None:
    proc, pids = start_ab(tmp_path)
    assert all(alive(p) for p in pids)
    proc.send_signal(sig)
    code = proc.wait(timeout=120)
    assert code == 128 + sig and code in DOCUMENTED
    assert all_gone(pids)  # it used to keep running, writing into --out
    saved = json.loads((tmp_path / "out" / "ab.json").read_text())
    assert saved["status"] == "interrupted" and saved["exit_code"] == code
    assert signal.Signals(sig).name in saved["reason"]


def test_sigkill_of_ab_leaves_no_pytest_running(tmp_path: Path) -> None:
    proc, pids = start_ab(tmp_path)
    proc.kill()
    proc.wait(timeout=120)
    assert all_gone(pids)


def test_a_hanging_process_is_timed_out_and_fails_the_run(tmp_path: Path) -> None:
    (tmp_path / "env").mkdir()
    hanging_script(tmp_path / "env" / "pytest.py", tmp_path / "pids")
    fakes = FakeEnvs(cells=CELLS[:1])
    env = Environment("A", Path(sys.executable), dir=tmp_path / "env")
    s = Settings(env, Environment("B", Path(sys.executable), dir=tmp_path / "env"), (), tmp_path / "out",
                 max_pairs=12, max_minutes=None, process_minutes=0.05, design="sequential")
    result = run_ab(s, prober=fakes.probe, collector=fakes.collect)
    assert result.status == "failed" and result.exit_code == 4
    assert "ran past 0.05 min (--process-minutes" in result.reason
    assert all_gone(read_pids(tmp_path / "pids"))
