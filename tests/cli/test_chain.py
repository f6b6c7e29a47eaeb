"""`batchperf chain` on the command line (issue 59): a chain that cannot run one step is a usage error (exit 3)
before anything runs, naming chain's own options; anything unforeseen is one line and exit 4, never 1 (the
"regression" code) and never a traceback."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from paths import REPO

import batchperf.releases.chain
from batchperf.ab.settings import Settings
from batchperf.cli import main
from batchperf.envs.venv import BUILDING


def venv(tmp_path: Path, name: str) -> Path:
    """A virtualenv folder whose python is this one (a link, as `-m venv` makes it)."""
    python = tmp_path / name / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.symlink_to(sys.executable)
    return tmp_path / name


def chain(tmp_path: Path, *extra: str, pytest_args: tuple[str, ...] = ("-m", "cpu")) -> list[str]:
    return ["chain", "--python", str(venv(tmp_path, "v1")), "--python", str(venv(tmp_path, "v2")),
            "--out", str(tmp_path / "out"), *extra, "--", *pytest_args]


def one_line_exit_3(code: int, err: str, tmp_path: Path) -> str:
    assert code == 3 and "Traceback" not in err and not (tmp_path / "out").exists(), err
    return err


def test_a_dir_that_is_no_checkout_is_exit_3_before_any_step_naming_dir(tmp_path: Path, capsys) -> None:
    """Seen: every step ran to "failed" (exit 4), each saying "pass --a-dir/--b-dir CHECKOUT", options chain lacks."""
    (tmp_path / "not-a-checkout").mkdir()
    code = main(chain(tmp_path, "--dir", str(REPO), "--dir", str(tmp_path / "not-a-checkout")))
    err = one_line_exit_3(code, capsys.readouterr().err, tmp_path)
    assert f"environment #1 (v2): {tmp_path / 'not-a-checkout'}: not a batchperf checkout" in err
    assert "give --dir a checkout" in err and "--a-dir" not in err and len(err.strip().splitlines()) == 1


def test_pytest_arguments_pytest_rejects_are_exit_3_before_any_step(tmp_path: Path, capsys) -> None:
    """Seen: every step ran to "failed" (exit 4) on an option pytest does not know."""
    code = main(chain(tmp_path, pytest_args=("--no-such-pytest-option",)))
    err = one_line_exit_3(code, capsys.readouterr().err, tmp_path)
    assert "pytest rejects the arguments after `--` (--no-such-pytest-option)" in err
    assert "unrecognized arguments: --no-such-pytest-option" in err


def test_a_malformed_env_is_named_as_given(tmp_path: Path, capsys) -> None:
    """Seen: `--env BAD` was reported as `--0-env 'BAD'`, an option no command has."""
    code = main(chain(tmp_path, "--env", "BAD"))
    err = one_line_exit_3(code, capsys.readouterr().err, tmp_path)
    assert "--env 'BAD': expected K=V" in err and "--0-env" not in err


def test_an_environment_still_marked_as_an_unfinished_build_is_exit_3(tmp_path: Path, capsys) -> None:
    args = chain(tmp_path)
    (tmp_path / "v2" / BUILDING).write_text("{}")
    err = one_line_exit_3(main(args), capsys.readouterr().err, tmp_path)
    assert "is an unfinished `batchperf env make` build" in err and "run that `batchperf env make` again" in err


def test_an_unforeseen_error_is_one_line_and_exit_4(tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("the disk said no")

    monkeypatch.setattr(batchperf.releases.chain, "run_chain", broken)
    code = main(chain(tmp_path))
    err = capsys.readouterr().err
    assert code == 4 and "batchperf chain: failed: RuntimeError: the disk said no" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_a_chain_judges_with_the_sequential_t_unless_told(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """At a chain's split alpha signed-rank decides only at 8 pairs, the whole budget; the t from the 5th, so the
    chain's default is the t (docs/upgrades.md, "What it costs"); --test signed-rank still picks ab's default."""
    seen: list[str] = []

    def record(envs: object, labels: object, base: Settings, **kwargs: object) -> None:
        seen.append(base.test)
        raise RuntimeError("recorded")

    monkeypatch.setattr(batchperf.releases.chain, "run_chain", record)
    assert main(chain(tmp_path / "default")) == 4
    assert main(chain(tmp_path / "asked", "--test", "signed-rank")) == 4
    assert seen == ["t", "signed-rank"]
