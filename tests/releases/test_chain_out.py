"""batchperf chain's output folder (releases/chain.hold_out over results.claim): one chain at a time, its refusals
usage errors in chain's words, and a folder where nothing ran left as it was found."""

from __future__ import annotations

from pathlib import Path

import pytest

from batchperf.ab.settings import UsageProblem
from batchperf.releases.chain import LOCK, hold_out
from batchperf.results.claim import claim

IDENTITY = {"environments": [], "settings": {}}


def test_a_folder_another_chain_holds_is_refused(tmp_path: Path) -> None:
    with claim(tmp_path / "out", LOCK):
        with pytest.raises(UsageProblem, match=r"--out .*: another batchperf chain is writing there; wait for it"):
            with hold_out(tmp_path / "out", IDENTITY):
                pass


def test_a_file_is_refused_and_a_folder_where_nothing_ran_is_gone(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("mine\n")
    with pytest.raises(UsageProblem, match="is a file, not a folder; give a new folder or this chain's own"):
        with hold_out(tmp_path / "f", IDENTITY):
            pass
    with pytest.raises(UsageProblem, match=r"cannot write there \(Not a directory\)"):
        with hold_out(tmp_path / "f" / "out", IDENTITY):
            pass
    with hold_out(tmp_path / "new", IDENTITY):
        assert (tmp_path / "new" / LOCK).is_file()
    assert not (tmp_path / "new").exists()
