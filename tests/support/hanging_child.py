"""A child that hangs (and forks a grandchild that hangs too), writing both pids; and ways to wait on processes.

Tests of the group guard's users (``ab``, ``refresh --run``) run it in place of pytest and check that a stop
signal, a time limit, or the parent's death leaves neither process running."""

from __future__ import annotations

import time
from pathlib import Path

import psutil

HANG = """
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
with open({pids!r}, "w") as fh:
    fh.write(f"{{os.getpid()}} {{child.pid}}\\n")
time.sleep(600)
"""


def hanging_script(path: Path, pids: Path) -> Path:
    """Write the hanging child to ``path`` (e.g. ``DIR/pytest.py``, which ``python -m pytest`` in DIR runs)."""
    path.write_text(HANG.format(pids=str(pids)))
    return path


def wait_for(condition, timeout_s: float = 60.0) -> bool:  # noqa: ANN001
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def read_pids(pids: Path) -> list[int]:
    wait_for(lambda: pids.exists() and pids.read_text().endswith("\n"))
    return [int(p) for p in pids.read_text().split()]


def alive(pid: int) -> bool:
    """Running, as opposed to gone or a zombie waiting for a parent that may never reap it."""
    try:
        return psutil.Process(pid).status() not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
    except psutil.NoSuchProcess:
        return False


def all_gone(pids: list[int], timeout_s: float = 60.0) -> bool:
    return wait_for(lambda: not any(alive(p) for p in pids), timeout_s)
