"""batchperf.results.claim: one folder, one holder; the refusals say what went wrong, the lock file is never
written, and a claim that measured nothing leaves the folder as it found it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from batchperf.results.claim import CannotMake, CannotOpen, Held, NotAFolder, claim


def test_a_second_claim_is_refused_naming_the_holder(tmp_path: Path) -> None:
    with claim(tmp_path / "out", ".x.lock"):
        with pytest.raises(Held) as held:
            claim(tmp_path / "out", ".x.lock")
    assert held.value.reason == f"pid {os.getpid()}"
    with claim(tmp_path / "out", ".x.lock"):  # released: free again
        pass


def test_a_tidy_claim_that_wrote_nothing_leaves_nothing(tmp_path: Path) -> None:
    with claim(tmp_path / "new", ".x.lock") as held:
        assert held.created and held.others() == []
    assert not (tmp_path / "new").exists()
    (tmp_path / "mine").mkdir()
    with claim(tmp_path / "mine", ".x.lock"):
        pass
    assert (tmp_path / "mine").is_dir() and list((tmp_path / "mine").iterdir()) == []  # the person's folder stays
    with claim(tmp_path / "mine", ".x.lock") as held:
        (tmp_path / "mine" / "ab.json").write_text("{}")
        assert held.others() == ["ab.json"]
    assert sorted(p.name for p in (tmp_path / "mine").iterdir()) == [".x.lock", "ab.json"]


def test_an_untidy_claim_keeps_its_lock_file_and_never_writes_it(tmp_path: Path) -> None:
    lock = tmp_path / ".x.lock"
    lock.write_text("a hard link to something that matters\n")
    with claim(tmp_path, ".x.lock", tidy=False):
        pass
    assert lock.read_text() == "a hard link to something that matters\n"


def test_a_lock_that_is_a_link_or_a_fifo_is_refused(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / ".x.lock").symlink_to(victim)
    with pytest.raises(CannotOpen) as link:
        claim(tmp_path / "a", ".x.lock")
    assert link.value.error is not None and link.value.lock == tmp_path / "a" / ".x.lock"
    (tmp_path / "b").mkdir()
    os.mkfifo(tmp_path / "b" / ".x.lock")
    with pytest.raises(CannotOpen, match="is not a regular file") as fifo:
        claim(tmp_path / "b", ".x.lock")
    assert fifo.value.error is None and victim.read_text() == "precious\n"


def test_a_file_or_a_path_under_a_file_is_no_folder(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("mine\n")
    with pytest.raises(NotAFolder, match="is a file, not a folder"):
        claim(tmp_path / "f", ".x.lock")
    with pytest.raises(CannotMake, match="Not a directory"):
        claim(tmp_path / "f" / "out", ".x.lock")
    assert (tmp_path / "f").read_text() == "mine\n"
