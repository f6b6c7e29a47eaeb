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
