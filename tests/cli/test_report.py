"""`batchperf report`: a folder it cannot write (a full disk, a file in the way) is one line, not a traceback
(issue 26, item 9)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from paths import DATA

from batchperf.cli import main

REAL = DATA / "results_cpu_small.json"


def full_disk(*args, **kwargs) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.parametrize("where", ["figure", "page"])
def test_a_full_disk_is_one_line_naming_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str], where: str) -> None:
    import matplotlib.figure

    if where == "figure":
        monkeypatch.setattr(matplotlib.figure.Figure, "savefig", full_disk)
    else:  # the page is written last, atomically (batchperf.results.io): its write finds the disk full
        import batchperf.report.page

        monkeypatch.setattr(batchperf.report.page, "atomic_write_text", full_disk)
    with pytest.raises(SystemExit) as exc:
        main(["report", str(REAL), "--out", str(tmp_path / "out")])
    message = str(exc.value.code)
    assert message.startswith(f"batchperf report: cannot write the report into {tmp_path / 'out'}")
    assert "No space left on device" in message and "Traceback" not in capsys.readouterr().err


def test_out_under_a_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    with pytest.raises(SystemExit) as exc:
        main(["report", str(REAL), "--out", str(blocker / "out")])
    assert str(exc.value.code).startswith(f"batchperf report: cannot write the report into {blocker / 'out'}")
    assert blocker.read_text() == "x"


# --- a chain read back: a file of another shape is one line naming the file, the field and the fix (issue 59) ---

@pytest.fixture(scope="module")
def chain_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from batchperf.releases.chain import run_chain
    from tests.releases.test_chain import LABELS, base, envs, fake_ab, ok

    out = tmp_path_factory.mktemp("chain") / "chain"
    run_chain(envs(3), LABELS[:3], base(out, 3), fake_ab([1.0, 0.85, 0.85], []), check=ok)
    return out


def _damaged(chain_dir: Path, tmp_path: Path, damage: str) -> tuple[list[Path], str]:
    """A copy of the chain with one field damaged: the inputs to report and the file the message must name."""
    import json
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(chain_dir, copy)
    if damage == "ab.json without environments":
        ab = copy / "step-01-0.29.0-to-0.30.0" / "ab.json"
        data = json.loads(ab.read_text())
        del data["environments"]
        ab.write_text(json.dumps(data))
        return [ab, copy / "step-02-0.30.0-to-0.31.0" / "ab.json"], str(ab)
    path = copy / "chain.json"
    data = json.loads(path.read_text())
    step = data["steps"][0]
    cell = next(iter(step["cells"].values()))
    if damage == "no environments":
        del data["environments"]
    elif damage == "no steps":
        del data["steps"]
    elif damage == "a step index out of range":
        step["b"] = 7
    elif damage == "a cell without verdict":
        del cell["verdict"]
    elif damage == "cells a list":
        step["cells"] = list(step["cells"].values())
    elif damage == "minutes null":
        step["minutes"] = None
    elif damage == "integer labels":
        for i, e in enumerate(data["environments"]):
            e["label"] = i
    elif damage == "an absurd estimate":
        next(iter(cell["metrics"].values()))["estimate"] = 1e308
    path.write_text(json.dumps(data))
    return [copy], str(path)


DAMAGES = {"no environments": "environments is null, not a list",
           "no steps": "steps is null, not a list",
           "a step index out of range": "steps[0].b is 7, not one of the chain's 3 releases",
           "a cell without verdict": ".verdict is null, not a string",
           "cells a list": "steps[0].cells is [",
           "minutes null": "steps[0].minutes is null, not an integer or a number",
           "integer labels": "environments[0].label is 0, not a string",
           "an absurd estimate": ".estimate is 1e+308, not a change B/A - 1",
           "ab.json without environments": "environments is null, not an object"}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_malformed_chain_is_one_line_naming_the_file_field_and_fix(chain_dir: Path, tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str],
                                                                     damage: str) -> None:
    inputs, named = _damaged(chain_dir, tmp_path, damage)
    with pytest.raises(SystemExit) as exc:
        main(["report", *map(str, inputs), "--out", str(tmp_path / "out")])
    message = str(exc.value.code)  # a message: exit 1, the documented code of a report that failed
    assert message.startswith(f"batchperf report: {named}: ") and DAMAGES[damage] in message
    assert "as `batchperf chain` wrote them" in message and "\n" not in message
    assert "Traceback" not in capsys.readouterr().err


def test_two_chain_folders_are_one_line_saying_one_chain_at_a_time(chain_dir: Path, tmp_path: Path) -> None:
    """Seen: `report CHAIN_A CHAIN_B` said "Is a directory"."""
    with pytest.raises(SystemExit) as exc:
        main(["report", str(chain_dir), str(chain_dir), "--out", str(tmp_path / "out")])
    message = str(exc.value.code)
    assert message.startswith(f"batchperf report: {chain_dir}: a whole chain") and "Is a directory" not in message
    assert "give one chain folder" in message and not (tmp_path / "out").exists()


def test_the_chain_as_written_still_draws(chain_dir: Path, tmp_path: Path) -> None:
    assert main(["report", str(chain_dir), "--out", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "index.html").is_file()
