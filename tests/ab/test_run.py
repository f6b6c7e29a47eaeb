"""`batchperf ab`'s loop with fake environments (no pytest processes): verdicts, stopping, budgets, bad input."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from ab_fakes import CELLS, NODEIDS, FakeEnvs, fingerprint, write_junit
from hanging_child import all_gone, read_pids
from paths import REPO, SUPPORT

from batchperf.ab.env import Environment, EnvironmentProblem, Outcome, Probe, outcomes, probe
from batchperf.ab.pairs import order_of
from batchperf.ab.report import render_ab_markdown
from batchperf.ab.run import prepare, resolve_design, run_ab, warm_up
from batchperf.ab.settings import Settings, UsageProblem
from batchperf.ab.stats.ttest import MIN_PAIRS as MIN_T_PAIRS
from batchperf.launch.kept_server import keep_from_env, reuse_or_start
from batchperf.measure.catalogue import AB_WITH_LATENCY
from batchperf.regress.fingerprint import GPU, Fingerprint, HardwareIdentity
from batchperf.regress.verdict import Verdict
from batchperf.results.io import read_results

HERE = REPO


def settings(tmp_path: Path, **kwargs: object) -> Settings:
    base = {"a": Environment("A", Path("/py/a"), dir=HERE), "b": Environment("B", Path("/py/b"), dir=HERE),
            "pytest_args": ("-m", "cpu"), "out": tmp_path / "ab", "max_pairs": 20, "max_minutes": None,
            "design": "sequential",  # the fakes run one process at a time (auto would start resident workers)
            "warmup": False, "rounds": 5}  # the pairs alone, as given (test_warmup.py holds the warm-up and the choice)
    return Settings(**{**base, **kwargs})  # type: ignore[arg-type]


def run(fakes: FakeEnvs, s: Settings, clock: object = None):  # noqa: ANN201
    extra = {"clock": clock} if clock is not None else {}
    return run_ab(s, runner=fakes.run, prober=fakes.probe, collector=fakes.collect, **extra)


def test_pairs_alternate_a_b_then_b_a() -> None:
    assert [order_of(i) for i in range(1, 5)] == [("A", "B"), ("B", "A"), ("A", "B"), ("B", "A")]


def test_a_slower_b_is_a_regression_and_the_files_are_ordinary_results(tmp_path: Path) -> None:
    fakes = FakeEnvs(speed={"A": 1.0, "B": 0.9}, versions={"B": {"vllm": "0.32.0"}})
    result = run(fakes, settings(tmp_path))
    assert result.exit_code == 1 and result.status == "done"
    assert {c.verdict for c in result.cells.values()} == {Verdict.REGRESSION}
    assert [label for label, _ in fakes.runs[:4]] == ["A", "B", "B", "A"]
    cell = next(iter(result.cells.values()))
    tput = cell.metrics["output_throughput"]
    assert tput.interval is not None and tput.interval.high < 0 and len(tput.a) == cell.settled_at
    assert result.versions_differ == {"vllm": ("-", "0.32.0")}
    saved = json.loads((tmp_path / "ab" / "ab.json").read_text())
    assert saved["exit_code"] == 1 and saved["versions_differ"] == {"vllm": ["-", "0.32.0"]}
    first = saved["pairs"][0]
    assert read_results(first["A"]["results"]).records and read_results(first["B"]["results"]).records
    assert saved["cells"][0]["metrics"][0]["ratios"][0] == pytest.approx(tput.b[0] / tput.a[0])
    assert "REGRESSION" in render_ab_markdown(result) and "vllm - → 0.32.0" in render_ab_markdown(result)


def test_a_a_is_no_change_and_settled_cells_are_left_out_of_later_pairs(tmp_path: Path) -> None:
    fakes = FakeEnvs(noise=0.004, cells=CELLS[:2])
    result = run(fakes, settings(tmp_path, margin=0.05))
    assert result.exit_code == 0 and {c.verdict for c in result.cells.values()} == {Verdict.NO_CHANGE}
    last_args = fakes.runs[-1][1]
    settled_early = [c for c in result.cells.values() if c.settled_at and c.settled_at < len(result.pairs)]
    for cell in settled_early:
        assert f"--deselect={cell.nodeid}" in last_args
    assert "--batchperf-rounds=5" in last_args and "--batchperf-progress=off" in last_args


def test_a_a_never_calls_a_regression_over_many_seeds(tmp_path: Path) -> None:
    calls = []
    for seed in range(12):
        fakes = FakeEnvs(noise=0.05, seed=seed, cells=CELLS[:1])
        result = run(fakes, settings(tmp_path / str(seed), max_pairs=12))
        calls.append(result.exit_code)
    assert 1 not in calls and set(calls) <= {0, 2}


def test_the_budget_of_pairs_ends_inconclusive(tmp_path: Path) -> None:
    fakes = FakeEnvs(noise=0.2, cells=CELLS[:1])
    result = run(fakes, settings(tmp_path, max_pairs=8))
    assert result.status == "budget" and "--max-pairs 8" in result.reason and result.exit_code == 2
    assert len(result.pairs) == 8 and len(fakes.runs) == 16


def test_the_budget_of_minutes_stops_before_a_pair_that_would_overrun(tmp_path: Path) -> None:
    now = [0.0]
    fakes = FakeEnvs(noise=0.2, cells=CELLS[:1], seconds=60.0)
    fakes.on_run = lambda: now.__setitem__(0, now[0] + 60.0)  # each process: one minute of the fake clock
    result = run(fakes, settings(tmp_path, max_minutes=19.0), clock=lambda: now[0])
    assert result.status == "budget" and "--max-minutes 19: 18.0 min spent" in result.reason
    assert len(result.pairs) == 9 and now[0] <= 19 * 60  # a tenth pair would have ended at 20 min


def test_minutes_that_cannot_reach_a_verdict_stop_the_run_at_once_naming_enough(tmp_path: Path) -> None:
    """Seen: a chain's steps of --max-minutes 10 fitted 3 of the 6 pairs a verdict needs, and measured them
    anyway; an hour of steps that could only end inconclusive."""
    now = [0.0]
    fakes = FakeEnvs(noise=0.2, cells=CELLS[:1], seconds=90.0)
    fakes.on_run = lambda: now.__setitem__(0, now[0] + 90.0)  # a pair: three minutes of the fake clock
    result = run(fakes, settings(tmp_path, max_minutes=10.0, max_pairs=6), clock=lambda: now[0])
    assert result.sequential_test.needs == 6 and len(result.pairs) == 1 and result.status == "budget"
    assert "3 pair(s) fit and a verdict needs 6" in result.reason and "--max-minutes 18 or more" in result.reason
    assert result.exit_code == 2


def test_the_budget_counts_a_pair_by_the_clock_not_its_processes_seconds_summed(tmp_path: Path) -> None:
    """Resident pairs: the two processes run at once, each saying 60 s, the pair taking 60 s of the clock. The sum
    (120 s) ended such a run a pair early (seen: 15.3 of 18 minutes spent, "a pair takes about 4.1 min", for
    2-minute pairs)."""
    now = [0.0]
    fakes = FakeEnvs(noise=0.2, cells=CELLS[:1], seconds=60.0)
    fakes.on_run = lambda: now.__setitem__(0, now[0] + 30.0)  # two processes at once: half a minute of the clock each
    result = run(fakes, settings(tmp_path, max_minutes=8.0), clock=lambda: now[0])
    assert result.status == "budget" and "a pair takes about 1.0 min" in result.reason
    assert 7 * 60 < now[0] <= 8 * 60  # stopped only when one more minute would not fit


def test_a_cell_failing_in_one_environment_is_reported_as_such(tmp_path: Path) -> None:
    broken = CELLS[1]
    fakes = FakeEnvs(speed={"A": 1.0, "B": 0.9}, cells=CELLS[:2],
                     fails={"B": {broken: "AssertionError: 3 request(s) did not produce their target"}})
    result = run(fakes, settings(tmp_path))
    cell = result.cells[broken]
    assert cell.verdict is Verdict.FAILED and "fails in environment B only" in cell.note
    assert "target" in cell.failures["B"] and not cell.metrics
    assert result.cells[CELLS[0]].verdict is Verdict.REGRESSION  # the other cell is still judged
    assert f"--deselect={NODEIDS[broken]}" in fakes.runs[-1][1]
    fakes = FakeEnvs(cells=CELLS[:1], fails={"B": {CELLS[0]: "boom"}})
    assert run(fakes, settings(tmp_path / "only")).exit_code == 4


def test_an_environment_that_crashes_stops_the_run(tmp_path: Path) -> None:
    fakes = FakeEnvs(crash={"B"})
    result = run(fakes, settings(tmp_path))
    assert result.status == "failed" and result.exit_code == 4
    assert "environment B failed to run in pair 1 (pytest exit 3)" in result.reason and "INTERNALERROR" in result.reason
    first = FakeEnvs(crash={"A"})
    assert run(first, settings(tmp_path / "a")).exit_code == 4
    assert [label for label, _ in first.runs] == ["A"]  # B's process is not spent on a lost pair


def test_an_environment_that_cannot_import_the_project_is_a_usage_error(tmp_path: Path) -> None:
    # a real interpreter whose batchperf import fails: the checkout's src/ holds a package that raises
    checkout = tmp_path / "checkout"
    (checkout / "perf_tests").mkdir(parents=True)
    (checkout / "src" / "batchperf").mkdir(parents=True)
    (checkout / "src" / "batchperf" / "__init__.py").write_text("raise ImportError('no module named torch')\n")
    s = settings(tmp_path, b=Environment("B", Path(sys.executable), dir=checkout))
    with pytest.raises(UsageProblem, match=r"environment B .*cannot import the project .*no module named torch.*"
                                           r"Install its dependencies"):
        run_ab(s, runner=FakeEnvs().run, collector=FakeEnvs().collect,
               prober=lambda env: FakeEnvs().probe(env) if env.label == "A" else probe(env))


def test_ctrl_c_keeps_the_finished_pairs(tmp_path: Path) -> None:
    fakes = FakeEnvs(noise=0.2, cells=CELLS[:1], interrupt_at=6)  # during pair 3
    result = run(fakes, settings(tmp_path))
    assert result.status == "interrupted" and result.exit_code == 130
    assert "2 finished pair(s)" in result.reason
    saved = json.loads((tmp_path / "ab" / "ab.json").read_text())
    assert saved["status"] == "interrupted" and len(saved["pairs"]) == 2
    assert len(saved["cells"][0]["metrics"][0]["a"]) == 2


def test_different_hardware_identity_is_refused(tmp_path: Path) -> None:
    fakes = FakeEnvs()
    base = fakes.probe

    def probe(env: Environment):  # noqa: ANN202
        found = base(env)
        if env.label == "B":
            ident = found.fingerprint.identity.to_dict()
            ident["cpu_threads"] = 2
            from batchperf.regress.fingerprint import Fingerprint, HardwareIdentity

            return type(found)(Fingerprint(HardwareIdentity.from_dict(ident), found.fingerprint.upgrade), "", "")
        return found

    fakes.probe = probe  # type: ignore[method-assign]
    with pytest.raises(UsageProblem, match=r"different hardware identities \(cpu_threads: 1 → 2\)"):
        run(fakes, settings(tmp_path))
    assert fakes.runs == []


def test_a_hardware_change_during_the_run_stops_it(tmp_path: Path) -> None:
    fakes = FakeEnvs(identity={"B": {"arch": "x86_64", "cpu_model": "Other CPU", "cpu_cores": 2, "gpus": []}})
    result = run(fakes, settings(tmp_path))
    assert result.status == "failed" and "different hardware identities" in result.reason


def test_an_environment_that_does_not_exist_is_a_usage_error(tmp_path: Path) -> None:
    s = settings(tmp_path, a=Environment("A", tmp_path / "nope" / "bin" / "python", dir=HERE))
    with pytest.raises(UsageProblem, match="environment A .*: no such interpreter. Make a virtualenv"):
        run_ab(s)


def test_a_selection_without_shared_cells_is_a_usage_error(tmp_path: Path) -> None:
    fakes = FakeEnvs(cells=())
    with pytest.raises(UsageProblem, match="select no cell that both environments have"):
        run(fakes, settings(tmp_path))


def test_junit_outcomes_are_read_by_cell(tmp_path: Path) -> None:
    path = tmp_path / "j.xml"
    write_junit(path, {"c1": Outcome("passed"), "c2": Outcome("skipped", "backend 'vllm' cannot run here"),
                       "c3": Outcome("failed", "boom")})
    found = outcomes(path)
    assert found["c2"] == Outcome("skipped", "backend 'vllm' cannot run here") and found["c3"].status == "failed"
    assert found["c1"].status == "passed" and outcomes(tmp_path / "missing.xml") == {}


def test_bad_variables_are_named() -> None:
    from batchperf.ab.env import parse_vars

    assert parse_vars(["X=1", "Y="], "--b-env") == (("X", "1"), ("Y", ""))
    with pytest.raises(EnvironmentProblem, match="--b-env 'oops': expected K=V"):
        parse_vars(["oops"], "--b-env")


def test_a_budget_of_pairs_that_cannot_conclude_is_refused_with_the_right_minimum(tmp_path: Path) -> None:
    """One cell, three deciding metrics at alpha 0.05: 7 pairs can conclude (2/2**7 <= 0.05/3); 6 cannot. It said
    "needs at least 1076 pairs" and then spent the whole budget."""
    fakes = FakeEnvs(cells=CELLS[:1])
    old = {"test": "signed-rank", "metrics": AB_WITH_LATENCY}
    with pytest.raises(UsageProblem, match="--max-pairs 6: a verdict on 1 cell.* needs at least 7 pairs"):
        run(fakes, settings(tmp_path, max_pairs=6, **old))
    assert fakes.runs == []
    done = run(fakes, settings(tmp_path / "seven", max_pairs=7, margin=0.2, **old))
    assert done.exit_code == 0 and len(done.pairs) == 7  # the first look that can conclude is the seventh


def test_the_t_test_s_floor_sets_the_fewest_pairs_and_its_boundaries_are_recorded(tmp_path: Path) -> None:
    """--test t: no look before ttest.MIN_PAIRS decides, so a smaller budget is refused; ab.json keeps the
    boundaries the replay (tools/ab_detector.py) judges with."""
    fakes = FakeEnvs(cells=CELLS[:1], speed={"A": 1.0, "B": 0.9})
    with pytest.raises(UsageProblem, match=f"needs at least {MIN_T_PAIRS} pairs"):
        run(fakes, settings(tmp_path, max_pairs=MIN_T_PAIRS - 1, test="t"))
    done = run(fakes, settings(tmp_path, out=tmp_path / "t", test="t"))
    assert done.exit_code == 1 and done.sequential_test.test == "t"
    saved = json.loads((tmp_path / "t" / "ab.json").read_text())["settings"]
    assert saved["test"] == "t" and len(saved["t_boundaries"]) == 20 and saved["t_boundaries"][0] is None


@pytest.mark.parametrize("fingerprint", ["not an object", ["a", "list"], {"identity": "not an object"}])
def test_a_malformed_fingerprint_in_a_pair_s_results_fails_the_run_with_exit_4(tmp_path: Path, fingerprint) -> None:
    """It was a traceback (AttributeError) and exit 1, which means a regression; ab.json was left "running"."""
    fakes = FakeEnvs(cells=CELLS[:1])

    def runner(env: Environment, args: list[str], stem: Path, timeout_s: float | None = None):  # noqa: ANN202
        done = fakes.run(env, args, stem, timeout_s)
        if env.label == "B" and done.results is not None:
            data = json.loads(done.results.read_text())
            data["machine_info"]["batchperf"] = fingerprint
            done.results.write_text(json.dumps(data))
        return done

    result = run_ab(settings(tmp_path), runner=runner, prober=fakes.probe, collector=fakes.collect)
    assert result.status == "failed" and result.exit_code == 4 and result.reason
    saved = json.loads((tmp_path / "ab" / "ab.json").read_text())
    assert saved["status"] == "failed" and saved["exit_code"] == 4


def test_the_resident_design_runs_each_pair_through_run_resident(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    fakes = FakeEnvs(speed={"A": 1.0, "B": 0.8}, noise=0.004, cells=CELLS[:1])
    calls = []

    def resident(envs, args, stems, order, cells, timeout_s, duet=False):  # noqa: ANN001, ANN202
        calls.append((order, list(cells)))
        return {label: fakes.run(envs[label], args, stems[label], timeout_s=timeout_s) for label in order}

    monkeypatch.setattr("batchperf.ab.run.run_resident", resident)
    result = run(fakes, settings(tmp_path, design="resident"))
    assert result.exit_code == 1 and len(calls) == len(result.pairs)
    assert [c[0] for c in calls[:2]] == [("A", "B"), ("B", "A")] and calls[0][1] == list(CELLS[:1])
    assert json.loads((tmp_path / "ab" / "ab.json").read_text())["settings"]["design"] == "resident"


def test_auto_runs_resident_pairs_unless_an_environment_sees_a_gpu() -> None:
    cpu = Probe(fingerprint(), "", "")
    ident = cpu.fingerprint.identity
    gpu_ident = HardwareIdentity(ident.arch, ident.cpu_model, ident.cpu_cores, (GPU("NVIDIA H200", 143_771),),
                                 ident.cpu_threads)
    gpu = Probe(Fingerprint(gpu_ident, cpu.fingerprint.upgrade, cpu.fingerprint.soft), "", "")
    assert resolve_design("auto", {"A": cpu, "B": cpu}) == "resident"
    assert resolve_design("auto", {"A": cpu, "B": gpu}) == "sequential"
    assert resolve_design("duet", {"A": gpu, "B": gpu}) == "duet"  # as asked


def test_the_design_run_is_recorded_beside_the_one_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fakes = FakeEnvs(noise=0.004, cells=CELLS[:1])
    monkeypatch.setattr("batchperf.ab.run.run_resident", lambda envs, args, stems, order, cells, timeout_s, duet=False: {
        label: fakes.run(envs[label], args, stems[label], timeout_s=timeout_s) for label in order})
    run(fakes, settings(tmp_path, design="auto"))
    saved = json.loads((tmp_path / "ab" / "ab.json").read_text())["settings"]
    assert (saved["design"], saved["design_asked"]) == ("resident", "auto")


def with_kept_server(fakes: FakeEnvs, pids: Path, seen: list[tuple[str, str]]):  # noqa: ANN201
    """The fakes' runner, each process asking for its side's kept server as vllm-server's processes do (a fake
    server, really started); ``seen``: (side, the server's URL) per process."""
    def run_with_server(env: Environment, args, stem, timeout_s=None):  # noqa: ANN001, ANN202
        keep = keep_from_env(dict(env.vars))
        assert keep is not None and keep.owner == os.getpid()
        def command(port: int):  # noqa: ANN202
            return [sys.executable, str(SUPPORT / "fake_health_server.py"), str(port), str(pids)], {}, \
                f"http://127.0.0.1:{port}/health"
        seen.append((env.label, reuse_or_start(keep, f"fake-{env.label}", command, 30).health_url))
        return fakes.run(env, args, stem, timeout_s=timeout_s)
    return run_with_server


def test_keep_servers_tells_each_side_where_its_server_is_and_ends_them_at_the_end(tmp_path: Path) -> None:
    """--keep-servers: each side's processes find their own kept server (started once, by the first, when it is
    never due for fresh ones), and ab ends every one when the run ends, saying how often each was started."""
    fakes = FakeEnvs(noise=0.004, cells=CELLS[:1])
    seen: list[tuple[str, str]] = []
    pids = tmp_path / "pids.txt"
    result = run_ab(settings(tmp_path, keep_servers=True, restart_servers_every=100),
                    runner=with_kept_server(fakes, pids, seen), prober=fakes.probe, collector=fakes.collect)
    assert result.exit_code == 0 and len(result.pairs) >= 2
    urls = {label: {url for side, url in seen if side == label} for label in ("A", "B")}
    assert len(urls["A"]) == len(urls["B"]) == 1 and urls["A"] != urls["B"]  # one each, kept across the pairs
    assert all_gone(read_pids(pids))  # ended with the run: both servers and their children
    saved = json.loads((tmp_path / "ab" / "ab.json").read_text())
    assert saved["settings"]["keep_servers"] is True and saved["settings"]["restart_servers_every"] == 100
    assert {label: [s["starts"] for s in kept] for label, kept in saved["kept_servers"].items()} == {"A": [1], "B": [1]}
    first = saved["server_starts"][0]["first"]  # --no-warmup: pair 1 starts them, in a drawn order
    assert saved["server_starts"] == [{"from_pair": 1, "first": first, "in_warmup": False}]
    assert result.pairs[0].order[0] == first and seen[0][0] == first
    assert "servers kept across pairs (--keep-servers)" in render_ab_markdown(result)
    assert "fake-A started 1x" in render_ab_markdown(result)


def test_kept_servers_are_restarted_every_n_pairs_at_the_same_boundary(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 56: a server kept for a whole run put its one level into every pair (the kept A/A rows leaned one way).
    Every N pairs both sides' servers are retired between pairs, and the next pair's processes start fresh ones;
    the side that starts first alternates from set to set, and the pairs run in the order their set's servers
    started, then alternate (batchperf.ab.kept.kept_order)."""
    monkeypatch.setattr("batchperf.ab.run.warmup_order", lambda: ("A", "B"))  # --no-warmup's pair 1: drawn
    fakes = FakeEnvs(noise=0.2, cells=CELLS[:1])  # noisy: undecided, so all 7 pairs run
    seen: list[tuple[str, str]] = []
    pids = tmp_path / "pids.txt"
    result = run_ab(settings(tmp_path, keep_servers=True, restart_servers_every=2, max_pairs=7),
                    runner=with_kept_server(fakes, pids, seen), prober=fakes.probe, collector=fakes.collect)
    assert len(result.pairs) == 7 and result.status == "budget"
    assert [(s.from_pair, s.first) for s in result.server_starts] == [(1, "A"), (3, "B"), (5, "A"), (7, "B")]
    assert ["".join(p.order) for p in result.pairs] == ["AB", "BA", "BA", "AB", "AB", "BA", "BA"]
    assert [label for label, _ in seen] == [label for p in result.pairs for label in p.order]  # ran in that order
    per_pair = [dict(seen[i:i + 2]) for i in range(0, len(seen), 2)]  # side -> URL, pair by pair
    for side in ("A", "B"):
        urls = [pair[side] for pair in per_pair]
        assert urls[0] == urls[1] != urls[2] == urls[3] != urls[4] == urls[5] != urls[6]  # sets of 2, both sides
    assert all_gone(read_pids(pids))  # the retired ones too
    saved = json.loads((tmp_path / "ab" / "ab.json").read_text())
    assert {label: [s["starts"] for s in kept] for label, kept in saved["kept_servers"].items()} == {"A": [4], "B": [4]}
    assert [s["from_pair"] for s in saved["server_starts"]] == [1, 3, 5, 7]
    assert "fresh servers from pair 1, A first, pair 3, B first, pair 5, A first, pair 7, B first" in \
        render_ab_markdown(result)


def test_the_warm_up_starts_the_kept_servers_in_a_drawn_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """B's server was always the second to start (the warm-up ran A B); the order is drawn now."""
    from batchperf.ab.kept import ServerStart

    monkeypatch.setattr("batchperf.ab.run.warmup_order", lambda: ("B", "A"))
    fakes = FakeEnvs(noise=0.004, cells=CELLS[:1])
    seen: list[tuple[str, str]] = []
    result = run_ab(settings(tmp_path, keep_servers=True, warmup=True),
                    runner=with_kept_server(fakes, tmp_path / "pids.txt", seen), prober=fakes.probe,
                    collector=fakes.collect)
    assert [label for label, _ in fakes.runs[:2]] == ["B", "A"]  # the warm-up
    assert result.server_starts[0] == ServerStart(1, "B", in_warmup=True)
    plain_fakes = FakeEnvs(noise=0.004, cells=CELLS[:1])
    plain = run(plain_fakes, settings(tmp_path / "plain", warmup=True))
    assert plain.server_starts == [] and [label for label, _ in plain_fakes.runs[:2]] == ["A", "B"]  # as before


def test_without_keep_servers_no_process_is_told_of_kept_servers(tmp_path: Path) -> None:
    fakes = FakeEnvs(noise=0.004, cells=CELLS[:1])
    told = []

    def run_plain(env: Environment, args, stem, timeout_s=None):  # noqa: ANN001, ANN202
        told.append(keep_from_env(dict(env.vars)))
        return fakes.run(env, args, stem, timeout_s=timeout_s)

    run_ab(settings(tmp_path), runner=run_plain, prober=fakes.probe, collector=fakes.collect)
    assert told and told == [None] * len(told)
    assert "servers kept" not in render_ab_markdown(run_ab(settings(tmp_path / "again"), runner=fakes.run,
                                                        prober=fakes.probe, collector=fakes.collect))


def test_each_pair_s_results_files_are_read_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The identity check, the folding and the choice of rounds take one parsed read of a pair (pairs.read_pair):
    they read each file for themselves before, two or three times a pair."""
    import batchperf.ab.pairs as pairs

    read: list[str] = []
    real = pairs.read_results
    monkeypatch.setattr(pairs, "read_results", lambda path: read.append(Path(path).name) or real(path))
    fakes = FakeEnvs(speed={"A": 1.0, "B": 0.9}, cells=CELLS[:1], seconds=10.0, round_s=1.0)
    result = run(fakes, settings(tmp_path, warmup=True, rounds=None))
    assert result.exit_code == 1 and result.rounds is not None and result.rounds.given is None
    pair_files = [f"pair-{p.index:03d}-{label}.json" for p in result.pairs for label in p.order]
    assert read == ["warmup-A.json", "warmup-B.json", *pair_files]


def test_the_stages_return_how_the_run_ended_and_run_ab_applies_it(tmp_path: Path) -> None:
    fakes = FakeEnvs(crash={"B"})
    s = settings(tmp_path, warmup=True)
    (tmp_path / "ab").mkdir()
    result = prepare(s, fakes.probe, fakes.collect)
    ended = warm_up(result, fakes.run, lambda line: None)
    assert ended is not None and ended.status == "failed" and ended.reason.startswith(
        "environment B failed to run in the warm-up (pytest exit 3)")
    assert result.status == "running" and result.reason == ""  # returned, not set from afar
    done = run(FakeEnvs(crash={"B"}), settings(tmp_path / "run", warmup=True))
    assert (done.status, done.reason, done.exit_code) == ("failed", ended.reason, 4)


def test_a_budget_stop_says_how_many_minutes_would_reach_a_verdict(tmp_path: Path) -> None:
    now = [0.0]
    fakes = FakeEnvs(noise=0.2, cells=CELLS[:1], seconds=90.0)
    fakes.on_run = lambda: now.__setitem__(0, now[0] + 90.0)
    result = run(fakes, settings(tmp_path, max_minutes=10.0, max_pairs=6), clock=lambda: now[0])
    assert result.minutes_needed == 18
    assert json.loads((tmp_path / "ab" / "ab.json").read_text())["minutes_needed"] == 18
