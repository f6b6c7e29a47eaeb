"""`make setup` checks the environment it stamps (issue 38, defect 10): ci/venv_ok.sh, and the Makefile's plan
(`make -n`, which installs nothing) with a stamp whose python is gone, broken or of another lock."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from paths import REPO

from batchperf.envs import lock

SCRIPT = REPO / "ci" / "venv_ok.sh"
pytestmark = pytest.mark.skipif(any(shutil.which(t) is None for t in ("bash", "make", "sha256sum")),
                                reason="needs bash, make and sha256sum")
ENV = {**os.environ, "PYTHONPATH": str(REPO / "src")}  # the stand-in python imports this checkout's batchperf


def _venv(tmp_path: Path, python: str | None = "real", marked: bool = True) -> Path:
    """A stamped environment: its bin/python is this interpreter ("real"), a script, or absent (None)."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / ".installed").touch()
    if python == "real":
        (venv / "bin" / "python").symlink_to(sys.executable)
    elif python is not None:
        (venv / "bin" / "python").write_text(python)
        (venv / "bin" / "python").chmod(0o755)
    if marked:
        lock.mark(venv, REPO / lock.LOCK_NAME)
    return venv


def _check(venv: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPT), str(venv), str(REPO / lock.LOCK_NAME)], capture_output=True,
                          text=True, env=ENV, timeout=60)


def test_a_working_environment_of_this_lock_is_kept(tmp_path: Path) -> None:
    done = _check(_venv(tmp_path))
    assert (done.returncode, done.stderr) == (0, "")


@pytest.mark.parametrize(("python", "marked", "says"), [
    (None, True, "has no runnable bin/python"),
    ("#!/bin/sh\nexit 1\n", True, "cannot import batchperf"),
    ("real", False, "records no lock"),
])
def test_a_stamp_over_a_broken_environment_is_not_trusted(tmp_path: Path, python, marked, says) -> None:
    done = _check(_venv(tmp_path, python, marked))
    assert done.returncode == 1
    assert says in done.stderr and "building it again" in done.stderr


def test_an_environment_of_another_lock_is_not_trusted(tmp_path: Path) -> None:
    venv = _venv(tmp_path)
    (venv / lock.MARKER).write_text("0" * 64 + "\n")
    done = _check(venv)
    assert done.returncode == 1 and "was built from another" in done.stderr


def _plan(venv: Path) -> str:
    """What `make setup` would run (-n: nothing is run but the check), with the stamp newer than its inputs."""
    os.utime(venv / "bin" / ".installed")
    done = subprocess.run(["make", "-n", "-C", str(REPO), "setup", f"VENV={venv}"], capture_output=True, text=True,
                          env=ENV, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout + done.stderr


def test_make_setup_rebuilds_when_the_stamped_python_is_gone(tmp_path: Path) -> None:
    plan = _plan(_venv(tmp_path, python=None))
    assert "has no runnable bin/python" in plan
    assert f"-m venv {tmp_path / 'venv'}" in plan  # once: "Nothing to be done", then Error 127 in `make test`


def test_make_setup_keeps_a_working_environment(tmp_path: Path) -> None:
    plan = _plan(_venv(tmp_path))
    assert "-m venv" not in plan and "Nothing to be done" in plan
