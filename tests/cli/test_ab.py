"""`batchperf ab` on the command line: every failure exits with one of its documented codes and one line saying why,
never 1 (1 means a measured regression) and never a traceback; usage errors come before the first pair."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from ab_fakes import CELLS, FakeEnvs

import batchperf.ab.run as ab_run
from batchperf.ab.settings import Settings
from batchperf.cli import main

DOCUMENTED = {0, 1, 2, 3, 4, 130, 143}  # docs/ab.md, "Exit codes"
REAL_RUN_AB = ab_run.run_ab


def ab(tmp_path: Path, *extra: str) -> list[str]:
    return ["ab", "--a", sys.executable, "--b", sys.executable, "--out", str(tmp_path / "out"), *extra,
            "--", "-m", "cpu"]


def one_at_a_time(s: Settings) -> Settings:
    """The fakes run one process at a time: the CLI's default design (auto: resident on a CPU) would start real
    resident workers, so an auto run is made sequential (an explicit design is kept)."""
    return replace(s, design="sequential") if s.design == "auto" else s


def faked(monkeypatch: pytest.MonkeyPatch, fakes: FakeEnvs, **kwargs: object) -> None:
    """The command's run_ab with fake environments (no pytest processes)."""
    monkeypatch.setattr(ab_run, "run_ab", lambda s, progress: REAL_RUN_AB(
        one_at_a_time(s), runner=fakes.run, prober=fakes.probe, collector=fakes.collect, progress=progress, **kwargs))


def one_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.startswith("batchperf ab:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_markdown_into_a_missing_folder_is_a_usage_error_before_the_first_pair(tmp_path: Path, capsys,
                                                                                monkeypatch) -> None:
    fakes = FakeEnvs(cells=CELLS[:1])
    faked(monkeypatch, fakes)
    code = main(ab(tmp_path, "--markdown", str(tmp_path / "missing" / "summary.md")))
    assert code == 3 and code in DOCUMENTED
    line = one_line(capsys.readouterr().err)
    assert "--markdown" in line and "does not exist" in line
    assert fakes.runs == [] and not (tmp_path / "out").exists()


@pytest.mark.parametrize("kind", ["file", "under a file"])
def test_an_out_that_is_a_file_is_a_usage_error(tmp_path: Path, capsys, monkeypatch, kind: str) -> None:
    (tmp_path / "f").write_text("mine\n")
    fakes = FakeEnvs(cells=CELLS[:1])
    faked(monkeypatch, fakes)
    argv = ab(tmp_path)
    argv[argv.index("--out") + 1] = str(tmp_path / "f" if kind == "file" else tmp_path / "f" / "ab")
    code = main(argv)
    assert code == 3 and code in DOCUMENTED
    assert "--out" in one_line(capsys.readouterr().err)
    assert fakes.runs == [] and (tmp_path / "f").read_text() == "mine\n"


def test_an_interpreter_that_does_not_exist_leaves_no_empty_out_folder(tmp_path: Path, capsys) -> None:
    argv = ab(tmp_path)
    argv[argv.index("--a") + 1] = str(tmp_path / "no-python")
    code = main(argv)
    assert code == 3 and "no such interpreter" in one_line(capsys.readouterr().err)
    assert not (tmp_path / "out").exists()


def test_a_relative_interpreter_is_taken_from_here_not_from_the_checkout(tmp_path: Path, monkeypatch) -> None:
    """Each process runs in its checkout's folder; a relative --python named a path there (seen: a chain with
    --dir elsewhere failed every step with "cannot start it")."""
    from batchperf.ab.env import interpreter
    from batchperf.cli.ab import environment

    venv = tmp_path / "venvs" / ".venv-x"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    monkeypatch.chdir(tmp_path / "venvs")
    env = environment("A", Path(".venv-x"), [], tmp_path / "elsewhere")
    assert env.python == venv / "bin" / "python" and env.python.is_absolute()
    assert env.python.is_symlink()  # not resolved: the link is what makes it the virtualenv's python
    assert interpreter(Path("python3")) == Path("python3")  # a name that is not here is left for PATH


def test_an_unexpected_error_during_the_run_exits_4_and_ab_json_says_failed(tmp_path: Path, capsys,
                                                                             monkeypatch) -> None:
    """A malformed fingerprint in a pair's results (or anything else unforeseen) was a traceback and exit 1."""
    fakes = FakeEnvs(cells=CELLS[:1])
    calls = []

    def check_identity(result: object, pair: object) -> str:
        calls.append(pair)
        if len(calls) == 2:
            raise AttributeError("'str' object has no attribute 'get'")
        return ""

    monkeypatch.setattr(ab_run, "check_identity", check_identity)
    faked(monkeypatch, fakes)
    code = main(ab(tmp_path))
    assert code == 4 and code in DOCUMENTED
    assert "unexpected error: AttributeError" in one_line(capsys.readouterr().err)
    saved = json.loads((tmp_path / "out" / "ab.json").read_text())
    assert saved["status"] == "failed" and saved["exit_code"] == 4 and len(saved["pairs"]) == 2


def test_an_unexpected_error_before_the_first_pair_exits_4_in_one_line(tmp_path: Path, capsys, monkeypatch) -> None:
    def broken(s: object, progress: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ab_run, "run_ab", broken)
    code = main(ab(tmp_path))
    assert code == 4 and "No space left on device" in one_line(capsys.readouterr().err)


def test_ctrl_c_at_the_probe_is_one_line_and_exit_130(tmp_path: Path, capsys, monkeypatch) -> None:
    fakes = FakeEnvs(cells=CELLS[:1])

    def probe(env: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(ab_run, "run_ab", lambda s, progress: REAL_RUN_AB(
        one_at_a_time(s), runner=fakes.run, prober=probe, collector=fakes.collect, progress=progress))
    code = main(ab(tmp_path))
    assert code == 130 and "interrupted before the first pair" in one_line(capsys.readouterr().err)
    assert not (tmp_path / "out").exists()


def test_markdown_into_a_folder_is_a_usage_error(tmp_path: Path, capsys, monkeypatch) -> None:
    fakes = FakeEnvs(cells=CELLS[:1], speed={"A": 1.0, "B": 0.5})  # a regression: it was found, then a traceback
    faked(monkeypatch, fakes)
    target = tmp_path / "summary.md"
    target.mkdir()
    assert main(ab(tmp_path, "--markdown", str(target))) == 3
    assert "is a folder" in one_line(capsys.readouterr().err) and fakes.runs == []


def test_a_summary_that_cannot_be_written_after_the_run_is_exit_4(tmp_path: Path, capsys, monkeypatch) -> None:
    import batchperf.cli.ab as cli_ab

    fakes = FakeEnvs(cells=CELLS[:1], speed={"A": 1.0, "B": 0.5})
    faked(monkeypatch, fakes)

    def full_disk(*args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(cli_ab, "atomic_write_text", full_disk)
    code = main(ab(tmp_path))
    line = one_line(capsys.readouterr().err)
    assert code == 4 and "summary could not be written" in line and "exit 1 in" in line  # ab.json keeps the verdict
    assert json.loads((tmp_path / "out" / "ab.json").read_text())["exit_code"] == 1


def test_a_link_planted_as_the_summary_is_replaced_not_written_through(tmp_path: Path, capsys, monkeypatch) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    summary = tmp_path / "out" / "ab.md"
    fakes = FakeEnvs(cells=CELLS[:1], speed={"A": 1.0, "B": 0.5})
    fakes.on_run = lambda: summary.is_symlink() or summary.symlink_to(victim)  # planted while the run goes on
    faked(monkeypatch, fakes)
    assert main(ab(tmp_path)) == 1
    assert victim.read_text() == "precious\n" and not summary.is_symlink() and "REGRESSION" in summary.read_text()


def test_the_test_and_the_deciding_metrics_are_chosen_on_the_command_line(tmp_path: Path, capsys,
                                                                          monkeypatch) -> None:
    """Default: signed-rank, throughput alone deciding; --test t picks the sequential t; --latency-decides restores
    the older deciding set; a test that does not exist, or --latency-decides beside --metrics, is a usage error."""
    fakes = FakeEnvs(cells=CELLS[:1], speed={"A": 1.0, "B": 0.9})
    faked(monkeypatch, fakes)
    assert main(ab(tmp_path / "t", "--test", "t")) == 1
    saved = json.loads((tmp_path / "t" / "out" / "ab.json").read_text())["settings"]
    assert saved["test"] == "t" and saved["metrics"] == ["output_throughput"] and saved["t_boundaries"]
    assert main(ab(tmp_path / "sr", "--latency-decides")) == 1
    saved = json.loads((tmp_path / "sr" / "out" / "ab.json").read_text())["settings"]
    assert saved["test"] == "signed-rank" and saved["metrics"] == ["output_throughput", "p99_ttft_ms", "p99_e2el_ms"]
    assert saved["per_look_level"] > 0 and saved["t_boundaries"] is None
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        main(ab(tmp_path / "bad", "--test", "bayes"))
    assert exc.value.code == 3 and "--test" in capsys.readouterr().err
    code = main(ab(tmp_path / "both", "--latency-decides", "--metrics", "output_throughput"))
    assert code == 3 and "give one" in one_line(capsys.readouterr().err)


def test_the_warm_up_and_the_rounds_on_the_command_line(tmp_path: Path, capsys, monkeypatch) -> None:
    """Default: a warm-up pair and rounds chosen from it; --no-warmup and --rounds R as given."""
    fakes = FakeEnvs(cells=CELLS[:1], speed={"A": 1.0, "B": 0.9}, seconds=10.0, round_s=1.0)
    faked(monkeypatch, fakes)
    assert main(ab(tmp_path / "default")) == 1
    saved = json.loads((tmp_path / "default" / "out" / "ab.json").read_text())
    assert saved["warmup"]["ran"] and saved["rounds"]["given"] is None and saved["rounds"]["chosen"] == 10
    assert "chosen from the warm-up" in (tmp_path / "default" / "out" / "ab.md").read_text()
    assert main(ab(tmp_path / "given", "--no-warmup", "--rounds", "6")) == 1
    saved = json.loads((tmp_path / "given" / "out" / "ab.json").read_text())
    assert saved["warmup"] == {"ran": False, "why": "--no-warmup", "discarded": True, "rounds": None, "seconds": {}}
    assert saved["rounds"] == {"chosen": 6, "given": 6, "why": "given", "round_s": None, "startup_s": None}


def test_a_worker_killed_mid_run_exits_4_naming_it(tmp_path: Path, capsys, monkeypatch) -> None:
    fakes = FakeEnvs(cells=CELLS[:1], speed={"A": 1.0, "B": 0.5}, killed={4: -9})  # pair 1's B
    faked(monkeypatch, fakes)
    code = main(ab(tmp_path))
    line = one_line(capsys.readouterr().err)
    assert code == 4 and "environment B failed to run in pair 1 (killed by SIGKILL" in line
    assert CELLS[0] in line and "unexpected error" not in line


def test_keep_servers_reaches_the_run_and_its_report(tmp_path: Path, monkeypatch) -> None:
    fakes = FakeEnvs(cells=CELLS[:1], noise=0.004)
    faked(monkeypatch, fakes)
    assert main(ab(tmp_path, "--keep-servers", "--no-warmup", "--rounds", "3")) == 0
    saved = json.loads((tmp_path / "out" / "ab.json").read_text())
    assert saved["settings"]["keep_servers"] is True and saved["kept_servers"] == {"A": [], "B": []}
    assert "A: none started; B: none started" in (tmp_path / "out" / "ab.md").read_text()  # the fakes start none


def test_restart_servers_every_reaches_the_settings_and_is_checked(tmp_path: Path, capsys, monkeypatch) -> None:
    fakes = FakeEnvs(cells=CELLS[:1], noise=0.004)
    faked(monkeypatch, fakes)
    assert main(ab(tmp_path, "--keep-servers", "--restart-servers-every", "5", "--no-warmup", "--rounds", "3")) == 0
    saved = json.loads((tmp_path / "out" / "ab.json").read_text())
    assert saved["settings"]["restart_servers_every"] == 5
    assert "fresh ones every 5 pair(s)" in (tmp_path / "out" / "ab.md").read_text()
    capsys.readouterr()
    for extra, says in ((["--restart-servers-every", "2"], "give --keep-servers with it"),
                        (["--keep-servers", "--restart-servers-every", "0"], "must be a whole number of pairs >= 1")):
        code = main(ab(tmp_path / "bad", *extra))
        err = capsys.readouterr().err
        assert code == 3 and says in err and "Traceback" not in err, (extra, err)
    with pytest.raises(SystemExit) as exc:  # argparse's own refusal, made exit 3 (2 means inconclusive)
        main(ab(tmp_path / "bad", "--keep-servers", "--restart-servers-every", "two"))
    assert exc.value.code == 3 and "invalid int value: 'two'" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()  # refused before anything ran


def test_an_environment_still_marked_as_an_unfinished_build_is_exit_3(tmp_path: Path, capsys) -> None:
    """Seen (issue 59): ab measured with a virtualenv `env make` had not finished (half its packages)."""
    from batchperf.envs.venv import BUILDING

    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.symlink_to(sys.executable)
    (tmp_path / "venv" / BUILDING).write_text("{}")
    code = main(["ab", "--a", sys.executable, "--b", str(tmp_path / "venv"), "--out", str(tmp_path / "out"),
                 "--", "-m", "cpu"])
    err = capsys.readouterr().err
    assert code == 3 and "is an unfinished `batchperf env make` build" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


# --- ab --confirm: a call measured again, B first, before it counts ---

def confirm_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, speeds: list[dict[str, float]],
                extra: tuple[str, ...] = ()) -> tuple[int, FakeEnvs, list[Settings]]:
    """``ab --confirm`` whose n-th ab run sees the speeds ``speeds[n]`` (by environment label)."""
    fakes = FakeEnvs(cells=CELLS[:1], noise=0.005)
    given: list[Settings] = []

    fakes.starts = []  # type: ignore[attr-defined]  # where each ab run's processes begin in fakes.runs

    def run_ab(s: Settings, progress):  # noqa: ANN001, ANN202
        fakes.speed = speeds[len(given)]
        fakes.starts.append(len(fakes.runs))  # type: ignore[attr-defined]
        given.append(s)
        return REAL_RUN_AB(one_at_a_time(s), runner=fakes.run, prober=fakes.probe, collector=fakes.collect,
                           progress=progress)

    monkeypatch.setattr(ab_run, "run_ab", run_ab)
    code = main(ab(tmp_path, "--confirm", "--no-warmup", "--rounds", "2", *extra))
    return code, fakes, given


def test_confirm_measures_a_call_again_with_b_first_and_it_stands(tmp_path: Path, capsys, monkeypatch) -> None:
    slow_b = {"A": 1.0, "B": 0.85}
    code, fakes, given = confirm_run(tmp_path, monkeypatch, [slow_b, slow_b])
    assert code == 1 and len(given) == 2
    assert given[1].a.label == "B" and given[1].out == tmp_path / "out" / "confirmation"
    # the first run's first process is A's, the confirmation's B's
    assert fakes.runs[0][0] == "A" and fakes.runs[fakes.starts[1]][0] == "B"  # type: ignore[attr-defined]
    saved = json.loads((tmp_path / "out" / "confirmed.json").read_text())
    [entry] = saved["calls"].values()
    assert entry["call"] == "regression" and entry["confirmed"] is True and saved["exit_code"] == 1
    assert entry["confirmation"]["estimate"] == pytest.approx(-0.15, abs=0.02)
    assert (tmp_path / "out" / "confirmation" / "ab.md").is_file()
    assert "regression confirmed (the confirmation, B first: regression, -1" in capsys.readouterr().out


def test_confirm_a_call_the_second_run_does_not_repeat_is_exit_2(tmp_path: Path, capsys, monkeypatch) -> None:
    code, _, given = confirm_run(tmp_path, monkeypatch, [{"A": 1.0, "B": 0.85}, {"A": 1.0, "B": 1.0}])
    assert code == 2 and code in DOCUMENTED and len(given) == 2
    saved = json.loads((tmp_path / "out" / "confirmed.json").read_text())
    assert [e["confirmed"] for e in saved["calls"].values()] == [False] and saved["outcome"] == "inconclusive"
    assert "regression NOT confirmed" in capsys.readouterr().out


def test_confirm_without_a_call_runs_once(tmp_path: Path, monkeypatch) -> None:
    code, _, given = confirm_run(tmp_path, monkeypatch, [{"A": 1.0, "B": 1.0}])
    assert code == 0 and len(given) == 1 and not (tmp_path / "out" / "confirmation").exists()
    assert json.loads((tmp_path / "out" / "confirmed.json").read_text())["calls"] == {}
