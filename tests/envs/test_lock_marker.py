"""The mark a locked environment carries (envs/lock_marker.py) and the fingerprint's soft fact from it; writing
the lock and the mark: tests/envs/test_lock.py."""

from __future__ import annotations

import json
import shutil
import sys

from paths import REPO

from batchperf.envs import lock
from batchperf.envs.lock_marker import MARKER, installed_digest
from batchperf.regress import fingerprint


def test_the_installed_lock_is_a_soft_fact_of_the_fingerprint(tmp_path, monkeypatch):
    path = tmp_path / lock.LOCK_NAME
    shutil.copy(REPO / lock.LOCK_NAME, path)
    lock.mark(tmp_path, path)
    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    fp = fingerprint.current(cpu_only=True)
    assert fp.soft["env_lock"] == lock.content_digest(path)
    assert "env_lock" not in json.dumps(fp.identity.to_dict())  # an upgrade (a new lock) still finds its baseline


def test_no_lock_fact_for_an_environment_not_built_from_one(tmp_path, monkeypatch):
    (tmp_path / MARKER).write_text("not a digest\n")
    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    assert installed_digest() is None
    assert "env_lock" not in fingerprint.current(cpu_only=True).soft


def test_a_different_lock_is_said_only_when_both_runs_have_one():
    a, b = "1" * 64, "2" * 64
    assert fingerprint.soft_warnings({"env_lock": a}, {"env_lock": b}) == [
        "environment lock differs: baseline 111111111111, now 222222222222 (the versions say which packages)"]
    assert fingerprint.soft_warnings({}, {"env_lock": b}) == []
    assert fingerprint.soft_warnings({"env_lock": a}, {"env_lock": a}) == []
