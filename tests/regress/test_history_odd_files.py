"""A history folder holding something other than regular files (issue 26, minor): a FIFO named ``*.json``
hung `batchperf history`, and a link to an endless device read without bound. Both are skipped with a note,
as a bad results file is; the reader refuses any non-regular file before opening it."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from gate_samples import cell_info, results_file

from batchperf.regress.history import load_history
from batchperf.results.io import read_results
from batchperf.results.record import ResultsError


def odd(folder: Path, kind: str) -> Path:
    path = folder / f"{kind}.json"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    return path


def finished(call, guard_s: float = 120.0):
    """``call()`` in a daemon thread: a hang fails the test instead of the whole run (a guard, not a timing)."""
    out: dict = {}

    def target() -> None:
        try:
            out["value"] = call()
        except Exception as exc:  # noqa: BLE001 - raised again in the test's thread
            out["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(guard_s)
    assert not thread.is_alive(), "it hung"
    if "error" in out:
        raise out["error"]
    return out["value"]


@pytest.mark.parametrize("kind", ["fifo", "zero"])
def test_a_fifo_or_a_link_to_a_device_in_a_history_folder_is_skipped_with_a_note(tmp_path: Path, kind: str) -> None:
    results_file(tmp_path / "good.json", [cell_info("c1")])
    odd(tmp_path, kind)
    runs, notes = finished(lambda: load_history(tmp_path))
    assert [r.path.name for r in runs] == ["good.json"]
    assert len(notes) == 1 and notes[0].startswith(f"skipped {kind}.json: ") and "not a regular file" in notes[0]


@pytest.mark.parametrize("kind", ["fifo", "zero"])
def test_the_reader_refuses_a_non_regular_file_before_opening_it(tmp_path: Path, kind: str) -> None:
    path = odd(tmp_path, kind)
    with pytest.raises(ResultsError, match="is not a regular file"):
        finished(lambda: read_results(path))
