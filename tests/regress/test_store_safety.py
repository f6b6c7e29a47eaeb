"""The baseline store under hostile input: hand-edited histories, symlinks, dry runs, bad roots, kept cells.

Issue 14, items 1, 4, 6, 9 and 10: each test reproduces a failure of the store before the fix.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path

import pytest
from gate_samples import CPU_FP, cell_info, results_file, scaled
from refresh_samples import A, B, run  # its fixtures folder and pinned come through conftest.py

from batchperf.regress.fingerprint import Fingerprint, HardwareIdentity
from batchperf.regress.store import (
    BASELINE_FILE,
    HISTORY_FILE,
    LOCK_FILE,
    LockHeld,
    append_history,
    locked,
    read_history,
)
from batchperf.results.record import ResultsError


def tree_digest(root: Path) -> dict[str, str]:
    """Every path under ``root`` with the sha256 of its bytes (or where a symlink points)."""
    out = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_symlink():
            out[rel] = "-> " + os.readlink(path)
        elif path.is_file():
            out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            out[rel] = "dir"
    return out


# --- 1. history entries are never deleted ----------------------------------------------------------


def test_a_complete_last_history_entry_without_a_newline_is_kept(tmp_path: Path) -> None:
    history = tmp_path / HISTORY_FILE
    history.write_text(json.dumps({"id": "one"}) + "\n" + json.dumps({"id": "two"}))  # printf %s, or an editor
    assert append_history(tmp_path, {"id": "three"}) == []
    assert [h["id"] for h in read_history(tmp_path)] == ["one", "two", "three"]


def test_a_one_line_history_without_a_newline_is_not_wiped(tmp_path: Path) -> None:
    (tmp_path / HISTORY_FILE).write_text(json.dumps({"id": "only"}))
    append_history(tmp_path, {"id": "next"})
    assert [h["id"] for h in read_history(tmp_path)] == ["only", "next"]


def test_a_torn_last_line_is_dropped_and_said(tmp_path: Path, pinned: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    with open(pinned.parent / HISTORY_FILE, "a") as fh:
        fh.write('{"id": "torn')
    notes = append_history(pinned.parent, {"id": "next"})
    assert len(notes) == 1 and "torn" in notes[0] and HISTORY_FILE in notes[0]
    assert [h["id"] for h in read_history(pinned.parent)][-1] == "next"
    # through the tool, the note is printed
    with open(pinned.parent / HISTORY_FILE, "a") as fh:
        fh.write('{"id": "torn again')
    assert run(tmp_path, results_file(tmp_path / "r.json", [cell_info(A), cell_info(B)]), "--reason", "x") == 0
    assert "dropped a torn last line" in capsys.readouterr().out


# --- 4. nothing is written through a symlink; a lock file is never truncated -----------------------


@pytest.mark.parametrize("flags", [("--reason", "x"), ("--reason", "x", "--dry-run"), ()])  # ok, dry run, refused
def test_a_symlinked_lock_file_is_never_written_through(tmp_path: Path, pinned: Path, flags: tuple[str, ...]) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (pinned.parent / LOCK_FILE).unlink(missing_ok=True)
    (pinned.parent / LOCK_FILE).symlink_to(victim)
    results = results_file(tmp_path / "r.json", [cell_info(A), cell_info(B)])
    expect = contextlib.nullcontext() if "--dry-run" in flags else \
        pytest.raises(SystemExit, match=f"{LOCK_FILE}: is a symbolic link")
    with expect:
        run(tmp_path, results, *flags)
    assert victim.read_text() == "precious\n"


def test_a_symlinked_history_is_never_appended_through(tmp_path: Path, pinned: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")  # no final newline: the old code also cut it back to the last newline
    history = pinned.parent / HISTORY_FILE
    history.unlink()
    history.symlink_to(victim)
    before = pinned.read_bytes()
    with pytest.raises(SystemExit, match=f"{HISTORY_FILE}: is a symbolic link"):
        run(tmp_path, results_file(tmp_path / "r.json", [scaled(cell_info(A), 0.5), cell_info(B)]), "--reason", "x")
    assert victim.read_text() == "precious"
    assert pinned.read_bytes() == before  # refused before the baseline was replaced: no entry without its history


def test_a_lock_file_is_never_truncated_or_written(tmp_path: Path, folder: Path) -> None:
    folder.mkdir(parents=True)
    lock = folder / LOCK_FILE
    lock.write_text("a hard link to something that matters\n")
    with locked(folder):
        assert lock.read_text() == "a hard link to something that matters\n"
    assert lock.read_text() == "a hard link to something that matters\n"


def test_the_lock_holder_is_named_without_writing_the_lock(tmp_path: Path, folder: Path) -> None:
    with locked(folder):
        with pytest.raises(LockHeld, match=f"another baseline refresh holds the lock \\(pid {os.getpid()}\\)"):
            with locked(folder):
                pass
    assert (folder / LOCK_FILE).read_bytes() == b""


# --- 9. a dry run changes no byte on disk ----------------------------------------------------------


def test_dry_run_changes_no_byte_even_with_repairs_pending(tmp_path: Path, pinned: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    folder = pinned.parent
    (folder / f".{BASELINE_FILE}.abc123.tmp").write_text('{"half": ')  # left by a killed refresh
    history = folder / HISTORY_FILE
    history.write_text("")  # the history lost the baseline's entry (crash between rename and append)
    with open(history, "a") as fh:
        fh.write('{"id": "torn')
    (folder / LOCK_FILE).unlink(missing_ok=True)
    before = tree_digest(tmp_path / "baselines")
    results = results_file(tmp_path / "r.json", [scaled(cell_info(A), 0.5), cell_info(B)])
    assert run(tmp_path, results, "--reason", "x", "--dry-run") == 0
    assert tree_digest(tmp_path / "baselines") == before
    out = capsys.readouterr().out
    assert "dry run: would remove" in out and "dry run: would append the missing history entry" in out


def test_dry_run_on_a_new_folder_creates_nothing(tmp_path: Path) -> None:
    assert run(tmp_path, results_file(tmp_path / "r.json", [cell_info(A)]), "--dry-run") == 0
    assert not (tmp_path / "baselines").exists()


# --- 10. an unwritable or non-directory baselines root is a message, not a traceback ---------------


def test_a_baselines_root_that_is_a_file_is_a_message(tmp_path: Path) -> None:
    root = tmp_path / "baselines"
    root.write_text("not a folder")
    with pytest.raises(SystemExit, match=r"(?i)batchperf refresh: .*baselines.*not a directory.*--baselines"):
        run(tmp_path, results_file(tmp_path / "r.json", [cell_info(A)]))


def test_an_unwritable_baselines_root_is_a_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    results = results_file(tmp_path / "r.json", [cell_info(A)])

    def denied(path: object, *args: object, **kwargs: object) -> None:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(os, "mkdir", denied)  # as a read-only root would (the tests may run as root)
    with pytest.raises(SystemExit, match=r"batchperf refresh: .*baselines.*Permission denied.*--baselines"):
        run(tmp_path, results)


# --- 6. kept cells keep the identity they were measured with --------------------------------------


def test_a_partial_refresh_never_stamps_kept_cells_with_another_identity(
        tmp_path: Path, pinned: Path, capsys: pytest.CaptureFixture[str]) -> None:
    threads = HardwareIdentity(CPU_FP.identity.arch, CPU_FP.identity.cpu_model, CPU_FP.identity.cpu_cores,
                               cpu_threads=2)
    other = Fingerprint(threads, CPU_FP.upgrade, CPU_FP.soft)
    assert other.key == CPU_FP.key  # the same folder: the thread count is checked per comparison, not per folder
    before = pinned.read_bytes()
    only_a = results_file(tmp_path / "a.json", [cell_info(A)], fp=other)
    assert run(tmp_path, only_a, "--reason", "x", "--partial") == 2
    out = capsys.readouterr().out
    assert "refresh refused" in out and "1 cell(s) of the baseline would be kept" in out
    assert "cpu_threads: (absent) → 2" in out
    assert pinned.read_bytes() == before
    # every cell re-measured with the new identity: fine, nothing is kept
    both = results_file(tmp_path / "ab.json", [cell_info(A), cell_info(B)], fp=other)
    assert run(tmp_path, both, "--reason", "two threads now") == 0


def test_store_errors_are_results_errors(tmp_path: Path) -> None:
    (tmp_path / HISTORY_FILE).symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ResultsError, match="is a symbolic link"):
        append_history(tmp_path, {"id": "x"})
    assert not (tmp_path / "elsewhere").exists()
