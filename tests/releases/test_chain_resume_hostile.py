"""`batchperf chain` with labels too long for a folder name (issue 59, defect 2): bounded, distinct folder names, the
same on resume, never a traceback or exit 1 (the "regression" code)."""

from __future__ import annotations

from pathlib import Path

from batchperf.releases.chain import run_chain
from tests.releases.test_chain import LABELS, base, envs, fake_ab, ok

def test_labels_too_long_for_a_folder_name_give_bounded_distinct_folders(tmp_path: Path) -> None:
    """Seen: two labels of 200 characters made the step folder's name 400+ bytes: OSError, traceback, exit 1."""
    labels = ["r" * 199 + "1", "r" * 199 + "2", "r" * 199 + "3"]
    out = tmp_path / "chain"
    result = run_chain(envs(3), labels, base(out, 3), fake_ab([1.0] * 3, []), check=ok)
    assert result.exit_code == 0 and [s.status for s in result.steps] == ["done"] * 3
    folders = [s.folder for s in result.steps]
    assert len(set(folders)) == 3 and all(len(f.encode()) < 200 for f in folders)
    assert all((out / f / "ab.json").is_file() for f in folders)
    # the cut label ends in its own hash, so releases that differ only past the cut stay apart in the name
    froms = [f.removeprefix(f"step-0{i + 1}-").split("-to-")[0] for i, f in enumerate(folders[:2])]
    assert froms[0].startswith("rrrr") and froms[0] != froms[1]
    again: list[tuple[int, int]] = []
    assert run_chain(envs(3), labels, base(out, 3), fake_ab([1.0] * 3, again), check=ok).exit_code == 0
    assert again == []  # the same names on resume: every step kept
