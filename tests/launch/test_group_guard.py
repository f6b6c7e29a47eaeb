"""The group guard says why it ended, or never started, a command whose owner is gone (issue 59: a kept server
whose owner was gone failed with an empty log and no reason)."""

from __future__ import annotations

import subprocess
import sys
import time

from hanging_child import alive, read_pids

from batchperf.launch import group_guard


def test_an_owner_gone_before_the_start_is_said_and_nothing_starts(tmp_path) -> None:
    owner = subprocess.Popen([sys.executable, "-c", "pass"])
    owner.wait()
    done = subprocess.run([sys.executable, group_guard.__file__, str(owner.pid), "1", "--", sys.executable, "-c",
                           f"open({str(tmp_path / 'started')!r}, 'w')"], capture_output=True, text=True, timeout=60,
                          start_new_session=True)
    assert done.returncode == group_guard.GONE
    assert f"(pid {owner.pid}) is gone; not starting" in done.stderr
    assert not (tmp_path / "started").exists()


def test_an_owner_that_goes_while_the_command_runs_is_said_and_the_command_ended(tmp_path) -> None:
    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    pid_file = tmp_path / "pid"
    script = f"import os, time; open({str(pid_file)!r}, 'w').write(f'{{os.getpid()}}\\n'); time.sleep(600)"
    # in a session of its own, as every user starts it: the guard ends every other member of its process group
    guard = subprocess.Popen([sys.executable, group_guard.__file__, str(owner.pid), "1", "--", sys.executable, "-c",
                              script], stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        (pid,) = read_pids(pid_file)
        owner.kill()
        owner.wait()
        _, err = guard.communicate(timeout=60)
        assert f"(pid {owner.pid}) is gone; ending" in err
        deadline = time.monotonic() + 10
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(pid)
    finally:
        owner.kill()
        guard.kill()
        guard.wait()
