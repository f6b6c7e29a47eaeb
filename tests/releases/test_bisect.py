"""`batchperf bisect` with fake environments: finds the first bad one, skips the broken, stops when unsure."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
from ab_fakes import CELLS, FakeEnvs
from paths import REPO

from batchperf.ab.env import Environment, EnvironmentProblem
from batchperf.ab.run import run_ab
from batchperf.ab.settings import Settings, UsageProblem
from batchperf.ab.stats import DEFAULT_TEST, fewest_max_pairs
from batchperf.cli.bisect import environments
from batchperf.launch.child import Stopped
from batchperf.releases.bisect import BAD, GOOD, INCONCLUSIVE, INTERRUPTED, SKIPPED, judge_step, run_bisect

HERE = REPO


def envs(n: int) -> list[Environment]:
    return [Environment(str(i), Path(f"/py/{i}"), dir=HERE) for i in range(n)]


def fake_ab(speeds: list[float], broken: set[int] = frozenset(), noise: float = 0.005, calls: list | None = None):  # noqa: ANN201
    """An ab whose environment #i runs at speeds[i]; #i in ``broken`` does not exist."""

    def ab(s: Settings):  # noqa: ANN202
        a, b = int(s.a.python.name), int(s.b.python.name)
        if calls is not None:
            calls.append((a, b))
        fakes = FakeEnvs(speed={"A": speeds[a], "B": speeds[b]}, noise=noise, cells=CELLS[:1], seed=b)
        if b in broken:
            def probe(env: Environment):  # noqa: ANN202
                raise EnvironmentProblem(f"environment B ({env.python}): no such interpreter")
            return run_ab(s, runner=fakes.run, prober=probe, collector=fakes.collect)
        return run_ab(s, runner=fakes.run, prober=fakes.probe, collector=fakes.collect)

    return ab


def ok(env: Environment) -> None:
    """Every fake environment runs."""


def base(tmp_path: Path, list_: list[Environment], **kwargs: object) -> Settings:
    given = {"max_pairs": 20, "max_minutes": None, **kwargs}
    return Settings(list_[0], list_[-1], ("-m", "cpu"), tmp_path / "bisect", **{"design": "sequential", **given})  # type: ignore[arg-type]


def test_finds_the_first_bad_environment_in_log2_steps(tmp_path: Path) -> None:
    speeds = [1.0, 1.0, 1.0, 1.0, 1.0, 0.85, 0.85, 0.85]  # #5 is the first slow one
    calls: list = []
    result = run_bisect(envs(8), base(tmp_path, envs(8)), fake_ab(speeds, calls=calls), check=ok)
    assert result.status == "found" and result.exit_code == 0 and (result.good, result.bad) == (4, 5)
    assert len(result.steps) == 3 and calls[0] == (0, 3)  # 6 open -> 3 steps
    assert all(a == result.steps[i].against for i, (a, _) in enumerate(calls))
    assert {s.index: s.outcome for s in result.steps} == {3: GOOD, 5: BAD, 4: GOOD}
    assert result.pairs == sum(s.pairs for s in result.steps) > 0
    saved = json.loads((tmp_path / "bisect" / "bisect.json").read_text())
    assert saved["status"] == "found" and saved["bad"] == 5 and saved["processes"] == 2 * result.pairs
    assert "first bad: #5" in result.summary()


def test_an_environment_that_cannot_run_is_skipped(tmp_path: Path) -> None:
    speeds = [1.0, 1.0, 0.85, 0.85, 0.85]
    result = run_bisect(envs(5), base(tmp_path, envs(5)), fake_ab(speeds, broken={2}), check=ok)
    skipped = [s for s in result.steps if s.outcome == SKIPPED]
    assert [s.index for s in skipped] == [2] and "no such interpreter" in skipped[0].why
    assert skipped[0].pairs == 0
    # #2 is unknown, so (like git bisect skip) the answer is "#2 or #3", not "#3"
    assert result.status == "narrowed" and (result.good, result.bad) == (1, 3) and result.exit_code == 2
    assert "among #2, #3" in result.summary()


def test_an_inconclusive_step_stops_with_the_range(tmp_path: Path) -> None:
    speeds = [1.0, 1.0, 1.0, 0.85]
    result = run_bisect(envs(4), base(tmp_path, envs(4), max_pairs=7), fake_ab(speeds, noise=0.2), check=ok)
    assert result.steps[0].outcome == INCONCLUSIVE and len(result.steps) == 1
    assert result.status == "narrowed" and result.exit_code == 2 and "among #1, #2, #3" in result.summary()


def test_bad_environment_lists_are_usage_errors(tmp_path: Path) -> None:
    with pytest.raises(UsageProblem, match=r"the good end cannot run: environment 0 \(/py/0\): no such interpreter"):
        run_bisect(envs(3), base(tmp_path, envs(3)), fake_ab([1.0, 1.0, 0.8]))  # the real check
    with pytest.raises(UsageProblem, match="at least two environments"):
        run_bisect(envs(1), base(tmp_path, envs(2)), fake_ab([1.0]))
    with pytest.raises(UsageProblem, match="at least two environments"):
        environments([Path("/py/a")], [], [])
    with pytest.raises(UsageProblem, match="2 --dir for 3 environments"):
        environments([Path("/a"), Path("/b"), Path("/c")], [HERE, HERE], [])
    shared = environments([Path("/a"), Path("/b")], [HERE], ["X=1"])
    assert [e.python for e in shared] == [Path("/a"), Path("/b")] and {e.dir for e in shared} == {HERE}
    assert shared[0].vars == (("X", "1"),)


def test_a_dir_that_is_no_checkout_is_refused_before_anything_runs_naming_it(tmp_path: Path) -> None:
    """Before, only the two ends were checked (naming ab's --a-dir/--b-dir): a middle --dir that is no checkout cost
    an ab run to be skipped, and the answer became a range."""
    calls: list = []
    given = envs(5)
    given[2] = Environment("2", Path("/py/2"), dir=tmp_path / "not-a-checkout")
    with pytest.raises(UsageProblem) as refused:
        run_bisect(given, base(tmp_path, given), fake_ab([1.0, 1.0, 0.85, 0.85, 0.85], calls=calls), check=ok)
    assert str(refused.value) == (f"environment #2: {tmp_path / 'not-a-checkout'}: not a batchperf checkout (no "
                                  "perf_tests/ or src/batchperf/); give --dir a checkout, or leave --dir out to run "
                                  "this one")
    assert calls == [] and not (tmp_path / "bisect").exists()


def test_cli_a_dir_that_is_no_checkout_is_exit_3_in_one_line(tmp_path: Path, capsys) -> None:
    from batchperf.cli import main

    out = tmp_path / "bisect"
    code = main(["bisect", "--dir", str(HERE), "--dir", str(tmp_path), "--dir", str(HERE), "--out", str(out),
                 "--", "-m", "cpu"])
    err = capsys.readouterr().err
    assert code == 3 and f"environment #1: {tmp_path}: not a batchperf checkout" in err and "give --dir" in err
    assert len(err.strip().splitlines()) == 1 and not out.exists()


def test_a_budget_too_small_for_any_verdict_stops_the_bisect_instead_of_skipping_every_step(tmp_path: Path) -> None:
    fewest = fewest_max_pairs(DEFAULT_TEST, 0.05)  # one cell, throughput deciding
    with pytest.raises(UsageProblem, match=f"needs at least {fewest} pairs"):
        run_bisect(envs(4), base(tmp_path, envs(4), max_pairs=fewest - 1), fake_ab([1.0, 1.0, 1.0, 0.85]), check=ok)


def test_an_out_holding_another_bisect_s_steps_is_refused(tmp_path: Path) -> None:
    (tmp_path / "bisect" / "step-01-0-vs-1").mkdir(parents=True)
    with pytest.raises(UsageProblem, match="already holds another bisect's steps"):
        run_bisect(envs(4), base(tmp_path, envs(4)), fake_ab([1.0, 1.0, 1.0, 0.85]), check=ok)


def test_a_step_stopped_by_sigterm_is_interrupted(tmp_path: Path) -> None:
    fakes = FakeEnvs(cells=CELLS[:1])
    fakes.on_run = lambda: (_ for _ in ()).throw(Stopped(signal.SIGTERM)) if len(fakes.runs) == 3 else None
    labelled = [Environment(label, Path(f"/py/{label}"), dir=HERE) for label in "AB"]
    done = run_ab(base(tmp_path, labelled), runner=fakes.run, prober=fakes.probe, collector=fakes.collect)
    assert done.exit_code == 143 and judge_step(done)[0] == INTERRUPTED


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_bisect_stopped_by_a_signal_exits_with_that_signals_code(tmp_path: Path, signum: int, code: int) -> None:
    """ab's own code for the step (143 for SIGTERM) is the bisect's: it used to say 130 whatever stopped it."""
    def ab(s: Settings):  # noqa: ANN202
        fakes = FakeEnvs(cells=CELLS[:1])
        fakes.on_run = lambda: (_ for _ in ()).throw(Stopped(signum)) if len(fakes.runs) == 3 else None
        return run_ab(s, runner=fakes.run, prober=fakes.probe, collector=fakes.collect)

    result = run_bisect(envs(4), base(tmp_path, envs(4)), ab, check=ok)
    assert result.status == INTERRUPTED and result.exit_code == code
    assert json.loads((tmp_path / "bisect" / "bisect.json").read_text())["exit_code"] == code
