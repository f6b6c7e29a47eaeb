"""`batchperf chain` resumed over what it did not write as it reads it (issue 59, defect 1), and labels too long
for a folder name (defect 2): a usage error naming the file, or the step measured again, never a traceback or
exit 1 (the "regression" code)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from batchperf.ab.settings import UsageProblem
from batchperf.cli import main
from batchperf.releases.chain import run_chain
from tests.releases.test_chain import LABELS, base, envs, fake_ab, ok

STEP_ONE = "step-01-0.29.0-to-0.30.0"


@pytest.mark.parametrize("text", ["[]", '"chain"', '{"environments": []}'])
def test_a_chain_json_of_another_shape_is_refused_naming_it(tmp_path: Path, text: str) -> None:
    out = tmp_path / "chain"
    out.mkdir()
    (out / "chain.json").write_text(text)
    calls: list[tuple[int, int]] = []
    with pytest.raises(UsageProblem, match=f"{out / 'chain.json'}: not a chain.json"):
        run_chain(envs(2), LABELS[:2], base(out, 2), fake_ab([1.0, 1.0], calls), check=ok)
    assert calls == [] and (out / "chain.json").read_text() == text  # nothing run, nothing replaced


def test_cli_a_chain_json_of_another_shape_is_exit_3_in_one_line(tmp_path: Path, capsys) -> None:
    out = tmp_path / "chain"
    out.mkdir()
    (out / "chain.json").write_text("[]")
    py = tmp_path / "venv-a" / "bin" / "python"
    py.parent.mkdir(parents=True)
    py.write_text("#!/bin/sh\n")
    py.chmod(0o755)
    other = tmp_path / "venv-b" / "bin" / "python"
    other.parent.mkdir(parents=True)
    other.symlink_to(py)
    code = main(["chain", "--python", str(py), "--python", str(other), "--out", str(out), "--", "-m", "cpu"])
    err = capsys.readouterr().err
    assert code == 3 and f"{out / 'chain.json'}: not a chain.json" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def _ab_json(out: Path) -> Path:
    return out / STEP_ONE / "ab.json"


@pytest.mark.parametrize("damage", ["a list", "no exit_code", "a cell without verdict", "cells an object",
                                    "a metric without its name"])
def test_a_step_whose_ab_json_is_unreadable_is_measured_again(tmp_path: Path, damage: str) -> None:
    out = tmp_path / "chain"
    run_chain(envs(2), LABELS[:2], base(out, 2), fake_ab([1.0, 1.0], []), check=ok)
    ab = json.loads(_ab_json(out).read_text())
    if damage == "a list":
        ab = []
    elif damage == "no exit_code":
        del ab["exit_code"]
    elif damage == "a cell without verdict":
        del ab["cells"][0]["verdict"]
    elif damage == "cells an object":
        ab["cells"] = {"x": ab["cells"][0]}
    else:
        del ab["cells"][0]["metrics"][0]["metric"]
    _ab_json(out).write_text(json.dumps(ab))
    calls: list[tuple[int, int]] = []
    result = run_chain(envs(2), LABELS[:2], base(out, 2), fake_ab([1.0, 1.0], calls), check=ok)
    assert calls == [(0, 1)] and result.exit_code == 0 and result.steps[0].status == "done"
    assert json.loads((out / "discarded" / f"{STEP_ONE}-1" / "ab.json").read_text()) == ab  # kept to read
    assert json.loads(_ab_json(out).read_text())["status"] == "done"


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
