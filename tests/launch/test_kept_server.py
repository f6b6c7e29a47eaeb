"""Servers kept across processes (``ab --keep-servers``): started once, used again by the next process of the same
command, outliving the process that started them, ended by their owner or with it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from hanging_child import all_gone, read_pids
from paths import REPO, SUPPORT

from batchperf.launch.environ import KEEP_SERVERS_ENV, KEEP_SERVERS_OWNER_ENV
from batchperf.launch.kept_server import (
    Keep,
    KeptServer,
    keep_from_env,
    read_record,
    reuse_or_start,
    server_key,
    stop_kept,
)
from batchperf.launch.server_process import ServerStartError, healthy

# One process that asks for the kept server, prints its URL and exits (as a pair's pytest process does).
ASK = """
import sys
from pathlib import Path
from batchperf.launch.kept_server import keep_from_env, reuse_or_start
script, pids, flag = sys.argv[1:4]
def command(port):
    return ([sys.executable, script, str(port), pids], {{"FLAG": flag}}, f"http://127.0.0.1:{{port}}/health")
kept = reuse_or_start(keep_from_env(), "fake", command, 30)
print(kept.health_url, kept.pid)
"""


def ask(tmp_path: Path, owner: int, flag: str = "x") -> KeptServer:
    """The kept server (its health URL and guard's pid), from a process of its own that then exits."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), KEEP_SERVERS_ENV: str(tmp_path / "servers"),
           KEEP_SERVERS_OWNER_ENV: str(owner)}
    done = subprocess.run([sys.executable, "-c", ASK.format(), str(SUPPORT / "fake_health_server.py"),
                           str(tmp_path / "pids.txt"), flag], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    url, pid = done.stdout.split()
    return KeptServer(url, int(pid))


def test_the_next_process_uses_the_kept_server_and_the_owner_ends_it(tmp_path: Path) -> None:
    first = ask(tmp_path, os.getpid())
    assert healthy(first.health_url)  # outlived the process that started it
    assert ask(tmp_path, os.getpid()) == first  # the next process found it, and its guard
    pids = read_pids(tmp_path / "pids.txt")
    assert len(pids) == 2  # one server and its child: started once
    # the pid a process is given is the guard's, whose tree holds the server and its child: what does the work
    assert set(pids) <= {p.pid for p in psutil.Process(first.pid).children(recursive=True)}
    other = ask(tmp_path, os.getpid(), flag="y")  # another environment: another server
    assert other != first
    records = stop_kept(tmp_path / "servers")
    assert sorted(r["starts"] for r in records) == [1, 1]
    assert all_gone(read_pids(tmp_path / "pids.txt"))  # both servers and their children


def test_a_kept_server_that_died_is_started_again(tmp_path: Path) -> None:
    first = ask(tmp_path, os.getpid())
    (record_path,) = (tmp_path / "servers").glob("server-*.json")
    os.killpg(read_record(record_path)["pid"], signal.SIGKILL)
    assert all_gone(read_pids(tmp_path / "pids.txt"))
    second = ask(tmp_path, os.getpid())
    assert healthy(second.health_url) and second != first
    (record,) = stop_kept(tmp_path / "servers")
    assert record["starts"] == 2


def test_kept_servers_end_with_their_owner_even_when_it_is_killed(tmp_path: Path) -> None:
    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        assert healthy(ask(tmp_path, owner.pid).health_url)
        pids = read_pids(tmp_path / "pids.txt")
        owner.kill()
        owner.wait()
        assert all_gone(pids)
    finally:
        owner.kill()
        stop_kept(tmp_path / "servers")


def test_a_bad_owner_is_refused_naming_both_variables(tmp_path: Path) -> None:
    assert keep_from_env({}) is None
    assert keep_from_env({KEEP_SERVERS_ENV: str(tmp_path), KEEP_SERVERS_OWNER_ENV: "12"}) == Keep(tmp_path, 12)
    with pytest.raises(ValueError, match=f"{KEEP_SERVERS_OWNER_ENV}='x' is not a pid.*or unset \\${KEEP_SERVERS_ENV}"):
        keep_from_env({KEEP_SERVERS_ENV: str(tmp_path), KEEP_SERVERS_OWNER_ENV: "x"})


def test_a_servers_identity_leaves_out_what_pytest_changes_per_test() -> None:
    base = server_key(["vllm", "--port", "0"], {"A": "1"})
    assert server_key(["vllm", "--port", "0"], {"A": "1", "PYTEST_CURRENT_TEST": "t (call)"}) == base
    assert server_key(["vllm", "--port", "0"], {"A": "1", "BATCHPERF_ROUND_GATE": "/tmp/gate-7"}) == base
    assert server_key(["vllm", "--port", "0"], {"A": "1", "_": "/usr/bin/time"}) == base
    assert server_key(["vllm", "--port", "0"], {"A": "2"}) != base
    assert server_key(["vllm", "--port", "1"], {"A": "1"}) != base


def test_a_kept_server_whose_owner_is_gone_is_refused_naming_the_owner(tmp_path: Path) -> None:
    # issue 59: it failed with an empty log and no reason (the guard ended the server at once)
    owner = subprocess.Popen([sys.executable, "-c", "pass"])
    owner.wait()

    def command(port: int) -> tuple[list[str], dict[str, str], str]:
        return ([sys.executable, str(SUPPORT / "fake_health_server.py"), str(port), str(tmp_path / "pids.txt")],
                dict(os.environ), f"http://127.0.0.1:{port}/health")

    with pytest.raises(ServerStartError, match=f"pid {owner.pid} \\(\\${KEEP_SERVERS_OWNER_ENV}\\), is gone"):
        reuse_or_start(Keep(tmp_path / "servers", owner.pid), "fake", command, 30)
    assert not (tmp_path / "pids.txt").exists()  # nothing was started


def test_a_kept_server_names_a_real_pid() -> None:
    with pytest.raises(ValueError, match="pid: 0"):
        KeptServer("http://127.0.0.1:9/health", 0)
