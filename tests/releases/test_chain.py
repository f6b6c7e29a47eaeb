"""`batchperf chain` with fake environments (no pytest children): each adjacent pair and first -> last judged in
release order, a failed step survived, an interrupted chain resumed, bad input refused before anything runs."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
from ab_fakes import CELLS, FakeEnvs
from paths import REPO

from batchperf.ab.env import Environment
from batchperf.ab.run import run_ab
from batchperf.ab.settings import Settings, UsageProblem
from batchperf.cli import main
from batchperf.launch.child import Stopped
from batchperf.releases.chain import FIRST_LAST, STEP, run_chain
from batchperf.releases.chain_report import Chain, levels, load, render_chain_markdown

LABELS = ["0.29.0", "0.30.0", "0.31.0", "0.32.0"]


def envs(n: int) -> list[Environment]:
    return [Environment(str(i), Path(f"/py/{i}"), dir=REPO) for i in range(n)]


def fake_ab(speeds: list[float], calls: list[tuple[int, int]], crash: frozenset[int] = frozenset(),
            interrupt: tuple[int, int] | None = None, refuse: tuple[int, int] | None = None,
            process_s: float | None = None, slow_once: dict[int, float] | None = None,
            cpu: dict[int, float] | None = None):  # noqa: ANN201
    """An ab whose environment #i runs at speeds[i]; #i in ``crash`` dies; the pair ``interrupt`` gets SIGINT at its
    third process; the pair ``refuse`` is a usage error (e.g. no shared cell); ``process_s``: each process takes
    that long on a fake clock (sequential: a pair twice it); ``slow_once``: #i at that speed in its first ab run
    only (a slow stretch of the machine); ``cpu``: #i's CPU seconds per output token at speed 1. Each environment
    keeps its own label, so a confirmation (the sides swapped) runs each at its own speed."""
    seen: set[int] = set()

    def ab(s: Settings, progress=lambda line: None):  # noqa: ANN001, ANN202
        a, b = int(s.a.python.name), int(s.b.python.name)
        calls.append((a, b))
        if (a, b) == refuse:
            raise UsageProblem("the pytest arguments -m cpu select no cell that both environments have")
        speed = {i: (slow_once or {}).get(i, speeds[i]) if i not in seen else speeds[i] for i in (a, b)}
        seen.update((a, b))
        figure = {s.a.label: (cpu or {}).get(a), s.b.label: (cpu or {}).get(b)}
        fakes = FakeEnvs(speed={s.a.label: speed[a], s.b.label: speed[b]}, noise=0.005, cells=CELLS[:1],
                         seed=10 * a + b, crash={e.label for e, i in ((s.a, a), (s.b, b)) if i in crash},
                         figures={label: {("telemetry", "cpu_seconds_per_output_token"): v}
                                  for label, v in figure.items() if v is not None})
        if (a, b) == interrupt:
            fakes.on_run = lambda: (_ for _ in ()).throw(Stopped(signal.SIGINT)) if len(fakes.runs) == 3 else None
        now = [0.0]
        if process_s is not None:
            fakes.seconds, fakes.on_run = process_s, lambda: now.__setitem__(0, now[0] + process_s)
        return run_ab(s, runner=fakes.run, prober=fakes.probe, collector=fakes.collect, progress=progress,
                      clock=lambda: now[0])

    return ab


def ok(env: Environment) -> None:
    """Every fake environment's interpreter exists."""


def base(out: Path, n: int = 4, **kwargs: object) -> Settings:
    e = envs(n)
    given = {"max_pairs": 20, "max_minutes": None, "design": "sequential", **kwargs}
    return Settings(e[0], e[-1], ("-m", "cpu"), out, **given)  # type: ignore[arg-type]


def test_each_step_in_release_order_then_first_to_last(tmp_path: Path) -> None:
    calls: list[tuple[int, int]] = []
    out = tmp_path / "chain"
    result = run_chain(envs(4), LABELS, base(out), fake_ab([1.0, 1.0, 0.85, 0.85], calls), check=ok)
    # the steps, then each call measured again with the sides swapped (B first)
    assert calls == [(0, 1), (1, 2), (2, 3), (0, 3), (2, 1), (3, 0)]
    assert [(s.kind, s.a, s.b) for s in result.steps] == [(STEP, 0, 1), (STEP, 1, 2), (STEP, 2, 3), (FIRST_LAST, 0, 3)]
    assert [s.outcome for s in result.steps] == ["no regression", "regression", "no regression", "regression"]
    assert [s.final_outcome for s in result.steps] == ["no regression", "regression", "no regression", "regression"]
    assert result.status == "done" and result.exit_code == 1
    saved = json.loads((out / "chain.json").read_text())
    assert saved["exit_code"] == 1 and [e["label"] for e in saved["environments"]] == LABELS
    for step in result.steps:  # one ab.json per pair, in a folder of its own
        assert json.loads((out / step.folder / "ab.json").read_text())["status"] == "done"
    assert result.steps[1].folder == "step-02-0.30.0-to-0.31.0" and result.steps[3].folder.startswith("first-last-")
    [level] = levels(Chain.of(result))
    assert level.metric == "output_throughput" and level.cumulative[0] == 0.0
    assert level.cumulative[-1] == pytest.approx(-0.15, abs=0.02)  # the product of the steps
    assert level.first_last is not None and level.first_last[1] < -0.1 < level.first_last[2] + 0.05
    table = render_chain_markdown(Chain.of(result))
    assert "0.30.0 -> 0.31.0" in table and "REGRESSION" in table and "(first -> last)" in table
    assert "Status: done: every step ran to its end" in table


def test_each_steps_own_progress_lines_go_out_under_its_name(tmp_path: Path) -> None:
    """A chain runs for an hour or more: ab's lines (warm-up, rounds chosen, each pair) reach the user, each under the
    step that printed it."""
    lines: list[str] = []
    run_chain(envs(3), LABELS[:3], base(tmp_path / "c", 3), fake_ab([1.0] * 3, []), progress=lines.append, check=ok)
    steps = ["0.29.0 -> 0.30.0: ", "0.30.0 -> 0.31.0: ", "0.29.0 -> 0.31.0 (first -> last): "]
    for name in steps:
        own = [line[len(name):] for line in lines if line.startswith(name)]
        assert own[0] == "measuring" and any(line.startswith("warm-up: ") for line in own)
        assert any(line.startswith("[pair 1/") for line in own) and own[-1].startswith("no regression (")
    assert all(any(line.startswith(n) for n in steps) for line in lines)


def test_two_environments_need_no_separate_first_to_last(tmp_path: Path) -> None:
    calls: list[tuple[int, int]] = []
    result = run_chain(envs(2), LABELS[:2], base(tmp_path / "c", 2), fake_ab([1.0, 1.0], calls), check=ok)
    assert calls == [(0, 1)] and result.exit_code == 0
    assert Chain.of(result).first_last is result.steps[0]


def test_a_failed_step_is_reported_and_the_chain_goes_on(tmp_path: Path) -> None:
    calls: list[tuple[int, int]] = []
    result = run_chain(envs(4), LABELS, base(tmp_path / "c"), fake_ab([1.0] * 4, calls, refuse=(2, 3)), check=ok)
    assert calls == [(0, 1), (1, 2), (2, 3), (0, 3)]
    assert [s.outcome for s in result.steps] == ["no regression", "no regression", "failed", "no regression"]
    assert "refused before its first pair: the pytest arguments" in result.steps[2].reason
    assert result.exit_code == 4


def test_an_environment_that_crashes_fails_its_two_steps_only(tmp_path: Path) -> None:
    calls: list[tuple[int, int]] = []
    result = run_chain(envs(4), LABELS, base(tmp_path / "c"), fake_ab([1.0] * 4, calls, crash=frozenset({2})),
                       check=ok)
    assert [s.outcome for s in result.steps] == ["no regression", "failed", "failed", "no regression"]
    assert "environment B failed to run in the warm-up" in result.steps[1].reason and result.exit_code == 4


def test_an_interrupted_chain_resumes_from_its_finished_steps(tmp_path: Path) -> None:
    out = tmp_path / "chain"
    first: list[tuple[int, int]] = []
    stopped = run_chain(envs(4), LABELS, base(out), fake_ab([1.0, 1.0, 0.85, 0.85], first, interrupt=(1, 2)), check=ok)
    assert first == [(0, 1), (1, 2)] and stopped.status == "interrupted" and stopped.exit_code == 130
    assert json.loads((out / "chain.json").read_text())["status"] == "interrupted"
    assert json.loads((out / "step-02-0.30.0-to-0.31.0" / "ab.json").read_text())["status"] == "interrupted"
    assert "Status: interrupted: run the same command again to resume" in render_chain_markdown(load([out]))

    again: list[tuple[int, int]] = []
    resumed = run_chain(envs(4), LABELS, base(out), fake_ab([1.0, 1.0, 0.85, 0.85], again), check=ok)
    # the finished step kept, the interrupted one measured again, then both calls confirmed
    assert again == [(1, 2), (2, 3), (0, 3), (2, 1), (3, 0)]
    assert resumed.status == "done" and resumed.exit_code == 1
    assert resumed.steps[0].pairs == stopped.steps[0].pairs and resumed.steps[1].outcome == "regression"
    assert (out / "discarded" / "step-02-0.30.0-to-0.31.0-1" / "ab.json").is_file()

    done: list[tuple[int, int]] = []
    assert run_chain(envs(4), LABELS, base(out), fake_ab([1.0] * 4, done), check=ok).exit_code == 1 and done == []


def test_sigterm_between_steps_is_143_and_resumable(tmp_path: Path) -> None:
    calls: list[tuple[int, int]] = []
    inner = fake_ab([1.0] * 4, calls)

    def ab(s: Settings, progress=lambda line: None):  # noqa: ANN001, ANN202
        if len(calls) == 2:
            raise Stopped(signal.SIGTERM)
        return inner(s, progress)

    result = run_chain(envs(4), LABELS, base(tmp_path / "c"), ab, check=ok)
    assert result.status == "interrupted" and result.exit_code == 143 and calls == [(0, 1), (1, 2)]


def test_a_step_whose_minutes_cannot_hold_a_verdict_stops_the_chain_naming_enough(tmp_path: Path) -> None:
    """Seen: a long-prompt chain's first step found a pair takes 5.4 min, so --max-minutes 24 held 4 of the 6 pairs
    a verdict needs, and stopped after its first pair; the chain went on to the next step, which would have done
    the same, and so on: five more steps of a warm-up and a pair each, measured for nothing."""
    calls: list[tuple[int, int]] = []
    lines: list[str] = []
    out = tmp_path / "chain"
    result = run_chain(envs(4), LABELS, base(out, max_minutes=10.0, max_pairs=8),
                       fake_ab([1.0] * 4, calls, process_s=45.0), progress=lines.append, check=ok)
    assert calls == [(0, 1)] and result.status == "budget" and result.exit_code == 3
    first = result.steps[0]
    assert first.status == "budget" and first.pairs == 1 and first.minutes_needed is not None
    assert [s.outcome for s in result.steps[1:]] == ["pending"] * 3
    assert f"--max-minutes {first.minutes_needed} or more" in result.reason
    assert "the 3 step(s) after it were not run" in result.reason
    assert lines[-1] == f"stopped: {result.reason}"
    saved = json.loads((out / "chain.json").read_text())
    assert saved["status"] == "budget" and saved["exit_code"] == 3 and saved["reason"] == result.reason
    assert saved["steps"][0]["minutes_needed"] == first.minutes_needed
    assert json.loads((out / first.folder / "ab.json").read_text())["minutes_needed"] == first.minutes_needed
    assert f"Status: stopped: {result.reason}" in render_chain_markdown(load([out]))  # the table says why it is short

    last = run_chain(envs(2), LABELS[:2], base(tmp_path / "two", 2, max_minutes=10.0, max_pairs=8),
                     fake_ab([1.0] * 2, [], process_s=45.0), check=ok)
    assert last.status == "done" and last.exit_code == 2  # nothing after it to spare: inconclusive, as ab said


def test_an_out_holding_another_chain_or_other_files_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "chain"
    run_chain(envs(2), LABELS[:2], base(out, 2), fake_ab([1.0, 1.0], []), check=ok)
    with pytest.raises(UsageProblem, match="holds another chain \\(its environments differ\\)"):
        run_chain(envs(2), ["a", "b"], base(out, 2), fake_ab([1.0, 1.0], []), check=ok)
    with pytest.raises(UsageProblem, match="holds another chain \\(its settings differ\\)"):
        run_chain(envs(2), LABELS[:2], base(out, 2, margin=0.05), fake_ab([1.0, 1.0], []), check=ok)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "thesis.tex").write_text("mine\n")
    with pytest.raises(UsageProblem, match="holds thesis.tex but no chain.json"):
        run_chain(envs(2), LABELS[:2], base(tmp_path / "other", 2), fake_ab([1.0, 1.0], []), check=ok)


@pytest.mark.parametrize("labels, given, message", [
    (["a"], 1, "at least two environments"),
    (["a", "b", "c"], 2, "3 --label for 2 environments"),
    (["a", "a"], 2, "--label a given to more than one environment"),
])
def test_bad_chains_are_refused_before_anything_runs(tmp_path: Path, labels: list[str], given: int,
                                                     message: str) -> None:
    calls: list[tuple[int, int]] = []
    with pytest.raises(UsageProblem, match=message):
        run_chain(envs(given), labels, base(tmp_path / "c", max(given, 2)), fake_ab([1.0] * 3, calls), check=ok)
    assert calls == [] and not (tmp_path / "c").exists()


def test_the_same_environment_twice_is_refused(tmp_path: Path) -> None:
    twice = [*envs(2), envs(2)[0]]
    with pytest.raises(UsageProblem, match=r"environment #2 \(/py/0\) is #0 again"):
        run_chain(twice, ["a", "b", "c"], base(tmp_path / "c", 2), fake_ab([1.0] * 3, []), check=ok)


def test_the_chain_reads_back_from_its_folder_and_from_its_ab_files(tmp_path: Path) -> None:
    out = tmp_path / "chain"
    result = run_chain(envs(3), LABELS[:3], base(out, 3), fake_ab([1.0, 0.85, 0.85], []), check=ok)
    from_folder = load([out])
    assert from_folder.labels == tuple(LABELS[:3]) and [s.outcome for s in from_folder.steps] == \
        [s.outcome for s in result.steps]
    files = [out / s.folder / "ab.json" for s in result.steps]
    loose = load([files[0], files[2], files[1]])  # the steps in release order; first -> last may stand anywhere
    assert [(s.kind, s.a, s.b) for s in loose.steps] == [(STEP, 0, 1), (STEP, 1, 2), (FIRST_LAST, 0, 2)]
    assert levels(loose)[0].cumulative == levels(from_folder)[0].cumulative
    assert from_folder.status == "done" and loose.status == "" and "Status:" not in render_chain_markdown(loose)


# --- the command line: usage errors are exit 3 in one line, and leave nothing ---

def test_cli_fewer_than_two_environments_is_exit_3(tmp_path: Path, capsys) -> None:
    code = main(["chain", "--python", str(tmp_path / "a"), "--out", str(tmp_path / "c"), "--", "-m", "cpu"])
    err = capsys.readouterr().err
    assert code == 3 and "at least two environments" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "c").exists()


def test_cli_a_duplicate_or_a_missing_interpreter_is_exit_3(tmp_path: Path, capsys) -> None:
    py = tmp_path / "venv-a" / "bin" / "python"
    py.parent.mkdir(parents=True)
    py.write_text("#!/bin/sh\n")
    py.chmod(0o755)
    code = main(["chain", "--python", str(py), "--python", str(py), "--out", str(tmp_path / "c")])
    err = capsys.readouterr().err
    assert code == 3 and "is #0 again" in err and len(err.strip().splitlines()) == 1
    code = main(["chain", "--python", str(py), "--python", str(tmp_path / "venv-b"), "--label", "0.31.0",
                 "--label", "0.32.0", "--out", str(tmp_path / "c")])
    err = capsys.readouterr().err
    assert code == 3 and "environment #1 (0.32.0)" in err and "no such interpreter" in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "c").exists()


# --- every call confirmed: measured again, B first, after the last step; explained by the engine figures ---

def two(out: Path, speeds: list[float], calls: list[tuple[int, int]], **kwargs: object):  # noqa: ANN201
    return run_chain(envs(2), LABELS[:2], base(out, 2), fake_ab(speeds, calls, **kwargs), check=ok)  # type: ignore


def test_a_call_the_second_run_repeats_is_confirmed_and_explained(tmp_path: Path) -> None:
    calls: list[tuple[int, int]] = []
    out = tmp_path / "chain"
    result = two(out, [1.0, 0.85], calls, cpu={0: 0.01, 1: 0.01})
    assert calls == [(0, 1), (1, 0)]  # the confirmation: the same pair, the newer release's process first
    [step] = result.steps
    cell = CELLS[0]
    assert step.calls == {cell: "regression"} and step.confirmed(cell) is True and result.exit_code == 1
    saved = json.loads((out / "chain.json").read_text())["steps"][0]
    entry = saved["calls"][cell]
    assert entry["call"] == "regression" and entry["confirmed"] is True
    assert entry["confirmation"]["folder"] == "confirm-step-01-0.29.0-to-0.30.0"
    assert entry["confirmation"]["verdict"] == "regression"  # in the pair's own terms, though its sides were swapped
    assert entry["confirmation"]["estimate"] == pytest.approx(-0.15, abs=0.02)
    swapped = json.loads((out / "confirm-step-01-0.29.0-to-0.30.0" / "ab.json").read_text())
    assert swapped["environments"]["A"]["python"] == "/py/1" and swapped["exit_code"] == 0  # B/A there: +17.6%
    # CPU per output token rose by 1 / 0.85 in both runs: the figure that explains the call
    [figure] = saved["explained"][cell]["differ"]
    assert figure["metric"] == "telemetry.cpu_seconds_per_output_token"
    assert figure["estimate"] == pytest.approx(1 / 0.85 - 1, abs=0.02) and figure["low"] > 0
    assert figure["confirmation"]["estimate"] == pytest.approx(1 / 0.85 - 1, abs=0.02)
    table = render_chain_markdown(load([out]))
    assert "| REGRESSION | confirmed: regression -15." in table
    assert "0.29.0 -> 0.30.0, " + cell + ", regression confirmed:" in table
    assert "  - cpu_seconds_per_output_token: +17." in table and ", confirmation +17." in table
    assert "Reported, not deciding" in table and "called" not in table


def test_a_confirmed_call_with_no_figure_that_differs_says_so(tmp_path: Path) -> None:
    out = tmp_path / "chain"
    result = two(out, [1.0, 0.85], [])
    assert result.exit_code == 1 and result.steps[0].explained[CELLS[0]]["differ"] == []
    line = next(ln for ln in render_chain_markdown(load([out])).splitlines() if "regression confirmed:" in ln)
    assert "no engine figure differs between the two releases in both runs (compared: " in line
    assert "kv_bytes_per_request_mean" in line  # what this cell's records carry, compared and equal


def test_a_call_made_on_a_slow_stretch_is_not_confirmed_and_is_no_regression(tmp_path: Path) -> None:
    """Seen: the server cell's 0.29.0 -> 0.30.0, -6.1% on a slow stretch, -0.9% run again. The fake B runs slow in
    its first ab only."""
    calls: list[tuple[int, int]] = []
    out = tmp_path / "chain"
    result = two(out, [1.0, 1.0], calls, slow_once={1: 0.85})
    [step] = result.steps
    assert calls == [(0, 1), (1, 0)] and step.outcome == "regression"
    assert step.confirmed(CELLS[0]) is False and step.final(CELLS[0]) == "inconclusive"
    assert step.final_outcome == "inconclusive" and result.exit_code == 2  # counted as undecided, never as a call
    saved = json.loads((out / "chain.json").read_text())
    assert saved["exit_code"] == 2 and saved["steps"][0]["calls"][CELLS[0]]["confirmed"] is False
    assert saved["steps"][0]["explained"] == {}  # only a confirmed call is explained
    chain = load([out])
    assert "| REGRESSION | NOT confirmed: no change" in render_chain_markdown(chain)
    [level] = levels(chain)
    assert level.confirmed == (False,) and level.first_last_confirmed is False  # drawn hollow


@pytest.mark.parametrize("speeds, slow_once, code", [
    ([1.0, 1.0, 1.0], {}, 0),  # no call: no confirmation
    ([1.0, 1.15, 1.15], {}, 0),  # a confirmed improvement
    ([1.0, 1.0, 0.85], {1: 0.85}, 1),  # a confirmed regression beside one that is not confirmed
    ([1.0, 1.0, 1.0], {1: 0.85}, 2),  # the only calls not confirmed
])
def test_the_exit_code_counts_confirmed_calls_only(tmp_path: Path, speeds: list[float], slow_once: dict[int, float],
                                                   code: int) -> None:
    calls: list[tuple[int, int]] = []
    result = run_chain(envs(3), LABELS[:3], base(tmp_path / "c", 3), fake_ab(speeds, calls, slow_once=slow_once),
                       check=ok)
    assert result.exit_code == code
    assert len(calls) == 3 + sum(bool(s.calls) for s in result.steps)  # one confirmation per call, not per step


def test_each_run_is_judged_at_the_chains_alpha_split_over_its_runs(tmp_path: Path) -> None:
    out = tmp_path / "chain"
    result = run_chain(envs(4), LABELS, base(out), fake_ab([1.0, 1.0, 0.85, 0.85], []), check=ok)
    assert result.step_alpha == pytest.approx(0.05 / 4)
    for run in result.runs:  # the steps and both confirmations
        saved = json.loads((out / run.folder / "ab.json").read_text())
        assert saved["settings"]["alpha"] == pytest.approx(0.05 / 4)
    assert json.loads((out / "chain.json").read_text())["settings"]["alpha"] == 0.05


def test_a_budget_too_small_for_the_split_alpha_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(UsageProblem, match=r"each of the chain's 4 runs is judged at alpha 0.05 / 4 = 0.0125 .*"
                                           r"needs at least 8 pairs"):
        run_chain(envs(4), LABELS, base(tmp_path / "c", max_pairs=6), fake_ab([1.0] * 4, []), check=ok)
    assert not (tmp_path / "c").exists()


def test_an_interrupted_confirmation_is_measured_again_on_resume(tmp_path: Path) -> None:
    out = tmp_path / "chain"
    first: list[tuple[int, int]] = []
    stopped = two(out, [1.0, 0.85], first, interrupt=(1, 0))
    assert first == [(0, 1), (1, 0)] and stopped.status == "interrupted" and stopped.exit_code == 130
    saved = json.loads((out / "chain.json").read_text())["steps"][0]
    assert saved["calls"][CELLS[0]] == {"call": "regression", "confirmed": None, "confirmation": None}
    assert "pending (measured again after the last step)" in render_chain_markdown(load([out]))

    again: list[tuple[int, int]] = []
    resumed = two(out, [1.0, 0.85], again)
    assert again == [(1, 0)]  # the step kept from its ab.json, its confirmation measured from its first pair
    assert resumed.status == "done" and resumed.exit_code == 1 and resumed.steps[0].confirmed(CELLS[0]) is True
    assert (out / "discarded" / "confirm-step-01-0.29.0-to-0.30.0-1" / "ab.json").is_file()
    done: list[tuple[int, int]] = []
    assert two(out, [1.0, 0.85], done).exit_code == 1 and done == []  # a finished confirmation is kept too


def test_a_confirmation_that_fails_leaves_the_call_failed_not_standing(tmp_path: Path) -> None:
    calls: list[tuple[int, int]] = []
    result = two(tmp_path / "c", [1.0, 0.85], calls, refuse=(1, 0))
    [step] = result.steps
    assert calls == [(0, 1), (1, 0)] and step.confirmation is not None and step.confirmation.outcome == "failed"
    assert step.confirmed(CELLS[0]) is False and step.final(CELLS[0]) == "failed" and result.exit_code == 4
    assert "refused before its first pair" in render_chain_markdown(Chain.of(result))
