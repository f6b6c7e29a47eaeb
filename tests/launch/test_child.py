"""A child under the group guard: its whole group stops at its time limit, on SIGINT/SIGTERM to this process (which
then raises Stopped), and when this process is SIGKILLed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from hanging_child import alive, all_gone, hanging_script, read_pids
from paths import REPO

from batchperf.launch.child import Stopped, run_guarded, stop_signals


def test_a_child_past_its_time_limit_is_stopped_with_everything_it_started(tmp_path: Path) -> None:
    script = hanging_script(tmp_path / "hang.py", tmp_path / "pids")
    done = run_guarded([sys.executable, str(script)], timeout_s=2.0, grace_s=2.0)
    assert done.timed_out and done.returncode != 0
    assert all_gone(read_pids(tmp_path / "pids"))


def test_a_child_that_ends_is_not_timed_out(tmp_path: Path) -> None:
    done = run_guarded([sys.executable, "-c", "raise SystemExit(3)"], timeout_s=600)
    assert not done.timed_out and done.returncode == 3


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_stops_the_group_then_raises_stopped(tmp_path: Path, sig: signal.Signals) -> None:
    script = hanging_script(tmp_path / "hang.py", tmp_path / "pids")
    sender = threading.Thread(target=lambda: (read_pids(tmp_path / "pids"), os.kill(os.getpid(), sig)))
    with stop_signals(), pytest.raises(Stopped) as stopped:
        sender.start()
        run_guarded([sys.executable, str(script)], grace_s=2.0)
    sender.join()
    assert stopped.value.exit_code == 128 + sig and isinstance(stopped.value, KeyboardInterrupt)
    assert all_gone(read_pids(tmp_path / "pids"))


def test_sigkill_of_the_parent_takes_the_child_s_group_with_it(tmp_path: Path) -> None:
    script = hanging_script(tmp_path / "hang.py", tmp_path / "pids")
    parent = subprocess.Popen([sys.executable, "-c", "import sys; from batchperf.launch.child import run_guarded; "
                               f"run_guarded([sys.executable, {str(script)!r}], grace_s=2.0)"],
                              env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    pids = read_pids(tmp_path / "pids")
    assert all(alive(p) for p in pids)
    parent.kill()
    parent.wait()
    assert all_gone(pids)


def test_a_foreground_child_gives_its_own_exit_code_and_a_signal_as_128_plus_it() -> None:
    assert run_guarded([sys.executable, "-c", "raise SystemExit(3)"], foreground=True).returncode == 3
    done = run_guarded([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"],
                       foreground=True)
    assert done.returncode == 128 + signal.SIGKILL and not done.timed_out


def test_a_foreground_child_past_its_time_limit_is_told_to_stop_and_waited_for(tmp_path: Path) -> None:
    # a SIGTERM, as pytest gets from `batchperf run`'s own SIGTERM: it writes what it has, then ends
    script = ("import pathlib, signal, sys, time\n"
              f"signal.signal(signal.SIGTERM, lambda *_: (pathlib.Path({str(tmp_path / 'saved')!r}).touch(), "
              "sys.exit(2)))\n"
              "time.sleep(60)\n")
    done = run_guarded([sys.executable, "-c", script], timeout_s=1.0, foreground=True)
    assert done.timed_out and done.returncode == 2 and (tmp_path / "saved").exists()


def test_sigkill_of_the_parent_stops_a_foreground_child(tmp_path: Path) -> None:
    # batchperf run's pytest: SIGKILLing the run left it measuring every selected cell to the end (issue 59, 5)
    pid_file = tmp_path / "pid"
    child = f"import os, time; open({str(pid_file)!r}, 'w').write(f'{{os.getpid()}}\\n'); time.sleep(120)"
    parent = subprocess.Popen([sys.executable, "-c", "import sys; from batchperf.launch.child import run_guarded; "
                               f"run_guarded([sys.executable, '-c', {child!r}], foreground=True)"],
                              env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    pids = read_pids(pid_file)
    try:
        assert alive(pids[0])
        parent.kill()
        parent.wait()
        assert all_gone(pids, timeout_s=30)
    finally:
        for pid in pids:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
