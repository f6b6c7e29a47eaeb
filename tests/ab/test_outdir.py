"""`batchperf ab`'s output folder: new or empty, one run at a time, nothing written through a planted link, nothing
left behind by a run that measured nothing. Every refusal is a usage error (exit 3) before the first pair."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from ab_fakes import CELLS, FakeEnvs
from paths import REPO

from batchperf.ab import outdir
from batchperf.ab.designs import run_cells
from batchperf.ab.env import Environment
from batchperf.ab.run import run_ab
from batchperf.ab.settings import Settings, UsageProblem


def settings(out: Path, **kwargs: object) -> Settings:
    base = {"a": Environment("A", Path("/py/a"), dir=REPO), "b": Environment("B", Path("/py/b"), dir=REPO),
            "pytest_args": ("-m", "cpu"), "out": out, "max_pairs": 12, "max_minutes": None, "design": "sequential"}
    return Settings(**{**base, **kwargs})  # type: ignore[arg-type]


def run(fakes: FakeEnvs, s: Settings):  # noqa: ANN201
    return run_ab(s, runner=fakes.run, prober=fakes.probe, collector=fakes.collect)


def test_a_folder_in_use_by_another_run_is_refused(tmp_path: Path) -> None:
    """Two runs into one folder read each other's pair files: the second is refused while the first holds it."""
    out = tmp_path / "ab"
    with outdir.claim(out):
        fakes = FakeEnvs(cells=CELLS[:1])
        with pytest.raises(UsageProblem, match=rf"another batchperf ab run \(pid {os.getpid()}\) is writing there"):
            run(fakes, settings(out))
        assert fakes.runs == []
    assert run(FakeEnvs(cells=CELLS[:1], speed={"A": 1.0, "B": 0.5}), settings(out)).exit_code == 1  # free again


def test_a_folder_holding_another_run_s_pairs_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    out = tmp_path / "ab"
    first = run(FakeEnvs(cells=CELLS[:1], speed={"A": 1.0, "B": 0.5}), settings(out))
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    fakes = FakeEnvs(cells=CELLS[:1])
    with pytest.raises(UsageProblem, match=r"already holds .*pair-001-A.json.*give a new --out"):
        run(fakes, settings(out))
    assert fakes.runs == [] and {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert json.loads((out / "ab.json").read_text())["exit_code"] == first.exit_code == 1


@pytest.mark.parametrize("kind", ["file", "under a file"])
def test_an_out_that_cannot_be_a_folder_is_a_usage_error(tmp_path: Path, kind: str) -> None:
    (tmp_path / "f").write_text("mine\n")
    out = tmp_path / "f" if kind == "file" else tmp_path / "f" / "ab"
    fakes = FakeEnvs(cells=CELLS[:1])
    with pytest.raises(UsageProblem, match=r"--out .*(is a file, not a folder|cannot make the folder)"):
        run(fakes, settings(out))
    assert fakes.runs == [] and (tmp_path / "f").read_text() == "mine\n"


def test_an_unwritable_out_is_a_usage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_open = os.open

    def read_only(path: object, *args: object, **kwargs: object) -> int:
        if str(path).endswith(outdir.LOCK):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(outdir.os, "open", read_only)
    with pytest.raises(UsageProblem, match=r"--out .*: cannot write there \(Permission denied\)"):
        run(FakeEnvs(cells=CELLS[:1]), settings(tmp_path / "new"))
    assert not (tmp_path / "new").exists()  # the folder it made is gone again


def test_a_usage_error_after_the_folder_was_made_leaves_no_empty_folder(tmp_path: Path) -> None:
    fakes = FakeEnvs(cells=CELLS[:1])
    with pytest.raises(UsageProblem, match=r"needs at least \d+ pairs"):
        run(fakes, settings(tmp_path / "new", max_pairs=4))  # refused after probing both environments
    assert not (tmp_path / "new").exists()
    (tmp_path / "empty").mkdir()  # a folder the person made stays, without the lock file
    with pytest.raises(UsageProblem):
        run(fakes, settings(tmp_path / "empty", max_pairs=4))
    assert (tmp_path / "empty").is_dir() and list((tmp_path / "empty").iterdir()) == []


def test_a_link_planted_for_a_pair_s_files_is_never_written_through(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    env = Environment("A", Path(sys.executable), dir=tmp_path)
    for suffix in (".log", ".json", ".xml"):
        folder = tmp_path / suffix.strip(".")
        folder.mkdir()
        (folder / f"pair-001-A{suffix}").symlink_to(victim)
        with pytest.raises(FileExistsError):
            run_cells(env, ["-m", "cpu"], folder / "pair-001-A")
    assert victim.read_text() == "precious\n"
