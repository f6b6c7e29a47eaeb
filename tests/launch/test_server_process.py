"""Servers the suite starts are always stopped: on stop(), on failed start, after a failing test, on SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hanging_child import alive, read_pids
from paths import REPO, SUPPORT

from batchperf.launch.server_process import ServerProcess, ServerStartError, _group_members, free_port


@pytest.fixture
def fake(tmp_path: Path) -> tuple[Path, Path]:
    return SUPPORT / "fake_health_server.py", tmp_path / "pids.txt"


def test_stop_ends_the_server_and_its_children(fake) -> None:
    script, pids = fake
    port = free_port()
    server = ServerProcess([sys.executable, str(script), str(port), str(pids)], f"http://127.0.0.1:{port}/health")
    server.start(timeout_s=30)
    assert server.running()
    started = read_pids(pids)
    assert len(started) == 2 and all(alive(p) for p in started)
    pgid = server.pid
    assert sorted(_group_members(pgid)) == sorted([pgid, *started])  # its guard, the server and the server's child
    server.stop()
    assert not any(alive(p) for p in started)
    assert _group_members(pgid) == []
    assert "fake server up" in server.log_tail()


def test_a_server_that_exits_is_reported_with_its_log(fake) -> None:
    script, pids = fake
    port = free_port()
    server = ServerProcess([sys.executable, str(script), str(port), str(pids), "3"], f"http://127.0.0.1:{port}/health")
    with pytest.raises(ServerStartError, match="exited with code 3"):
        server.start(timeout_s=30)
    assert not any(alive(p) for p in read_pids(pids))


def test_a_server_never_ready_is_stopped_after_the_timeout(fake) -> None:
    script, pids = fake
    port, wrong = free_port(), free_port()
    server = ServerProcess([sys.executable, str(script), str(port), str(pids)], f"http://127.0.0.1:{wrong}/health")
    with pytest.raises(ServerStartError, match="not ready") as info:
        server.start(timeout_s=2)
    assert "fake server up" in str(info.value)  # the log tail is in the message
    assert not any(alive(p) for p in read_pids(pids))


INNER_TEST = """
import os, signal, sys
from batchperf.launch.server_process import ServerProcess, free_port

def test_starts_a_server_then_{how}():
    port = free_port()
    server = ServerProcess([sys.executable, {script!r}, str(port), {pids!r}], f"http://127.0.0.1:{{port}}/health")
    server.start(timeout_s=30)
    {action}
"""


@pytest.mark.parametrize(("how", "action", "outcome"), [
    ("fail", "assert False, 'the cell failed'", "failed"),
    ("get_sigterm", "os.kill(os.getpid(), signal.SIGTERM)", "killed"),
])
def test_no_process_is_left_after_a_failing_or_killed_run(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
                                                          fake, how, action, outcome) -> None:
    script, pids = fake
    pytester.makepyfile(INNER_TEST.format(how=how, script=str(script), pids=str(pids), action=action))
    src = str(REPO / "src")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")])))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:batchperf")
    if outcome == "failed":
        result.assert_outcomes(failed=1)
    else:
        assert result.ret == -signal.SIGTERM  # the run died of the signal, after our handler stopped the server
    started = read_pids(pids)
    assert len(started) == 2
    assert not any(alive(p) for p in started), "a server process outlived the test run"


STARTER = """
import sys, time
from batchperf.launch.server_process import ServerProcess, free_port
port = free_port()
server = ServerProcess([sys.executable, {script!r}, str(port), {pids!r}], f"http://127.0.0.1:{{port}}/health")
server.start(timeout_s=30)
print("started", flush=True)
time.sleep(600)
"""


def test_a_sigkilled_starter_leaves_neither_the_server_nor_its_children(fake) -> None:
    """SIGKILL runs no handler of ours: the server's own group ends itself (issue 14: its child was orphaned)."""
    script, pids = fake
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    starter = subprocess.Popen([sys.executable, "-c", STARTER.format(script=str(script), pids=str(pids))], env=env,
                               stdout=subprocess.PIPE, text=True)
    assert starter.stdout is not None
    with starter.stdout:
        assert starter.stdout.readline().strip() == "started"
    started = read_pids(pids)
    assert len(started) == 2 and all(alive(p) for p in started)
    starter.kill()
    starter.wait()
    deadline = time.monotonic() + 20
    while any(alive(p) for p in started) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = [p for p in started if alive(p)]
    for pid in left:  # not to leave them running after a failure
        os.kill(pid, signal.SIGKILL)
    assert not left, "a process of the server outlived the process that started it"
