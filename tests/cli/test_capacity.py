"""``batchperf capacity``: the search driven through the CLI, each probe a (fake) child pytest writing a results file."""

from __future__ import annotations

import math
import os
import random
import signal
import statistics
import sys
import threading
import time
from pathlib import Path

import pytest
from gate_samples import cell_info, results_file

from batchperf.capacity import probe as capacity_probe
from batchperf.cli import capacity as cli_capacity
from batchperf.cli import main
from batchperf.regress.gate import compare_cell
from batchperf.regress.verdict import Verdict
from batchperf.results.io import read_results

EDGE = 2.0  # the fake cell's attainment crosses 0.9 at load 2.0


class FakeChild:
    """Stands in for the child pytest: writes the cell's results at the load it was given (seeded noise)."""

    def __init__(self, noise: float = 0.01, cells: int = 1) -> None:
        self.argvs: list[list[str]] = []
        self.rng, self.noise, self.cells = random.Random(3), noise, cells

    def __call__(self, argv: list[str]) -> int:
        self.argvs.append(argv)
        loads = [float(x) for x in argv[-1].removeprefix("--batchperf-load=").split(",")]  # the probe's, the reference's
        out = Path(next(a for a in argv if a.startswith("--benchmark-json=")).split("=", 1)[1])
        records = []
        for load in loads:
            attainment = min(1.0, max(0.0, 0.9 - 0.5 * (load - EDGE) + self.rng.gauss(0, self.noise)))
            for i in range(self.cells):
                record = cell_info(f"cpu-tiny-qwen2-continuous-bs4-p64-c8-wtenants-two-load{load:g}" + "-x" * i)
                record.cell["load"] = load
                met = round(60 * attainment)
                record.slo = {"attainment": met / 60, "offered": 60, "met": met, "request_goodput": met,
                              "tenant_count": 2}
                record.traces = []  # the counts come from the slo section (tests/results: pooled over rounds' traces)
                records.append(record)
        results_file(out, records)
        return 0

    @staticmethod
    def load_of(argv: list[str]) -> float:
        """The probe's load (the reference's follows it)."""
        return float(argv[-1].removeprefix("--batchperf-load=").split(",")[0])


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    (tmp_path / "perf_tests").mkdir()
    return tmp_path / "perf_tests"


def test_capacity_fits_the_edge_and_writes_a_gateable_results_file(tmp_path, suite, monkeypatch, capsys) -> None:
    child = FakeChild()
    monkeypatch.setattr(capacity_probe, "run_child", child)
    out = tmp_path / "cap.json"
    code = main(["capacity", "--suite", str(suite), "--out", str(out), "--batchperf-backends=continuous",
                 "--resolution", "0.1", "--budget-min", "5"])
    assert code == 0
    assert all("--batchperf-backends=continuous" in a and a[-1].startswith("--batchperf-load=") for a in child.argvs)
    record = read_results(out).records[0]
    assert record.id == "cpu-tiny-qwen2-continuous-bs4-p64-c8-wtenants-two-capacity" and "load" not in record.cell
    cap = record.capacity
    assert cap["converged"] is True and cap["stopped"] == "resolution" and cap["target_attainment"] == 0.9
    assert cap["interval_high"] - cap["interval_low"] <= 0.1 * cap["max_load"]
    assert cap["interval_low"] <= EDGE <= cap["interval_high"]
    assert cap["probes"] == len(child.argvs) == len(list((tmp_path / "cap-probes").glob("*.json")))
    # the fake's records have no traces: offered / duration per probe (60 req/s), per unit of load of the probes
    # nearest the capacity (search.Capacity.rate_per_load)
    loads = [FakeChild.load_of(a) for a in child.argvs]
    gap = min(abs(math.log(load / cap["max_load"])) for load in loads)
    per_load = statistics.median(60 / record.metrics["duration"] / load for load in loads
                                 if abs(math.log(load / cap["max_load"])) == gap)
    assert cap["max_request_rate"] == pytest.approx(cap["max_load"] * per_load)
    assert record.capacity["max_load"] == pytest.approx(EDGE, rel=0.05)
    printed = capsys.readouterr().out
    assert "capacity" in printed and "/60 met" in printed and "interval" in printed
    # gated like any cell: a second search, as good, compares as no change; one at half the capacity regresses
    same = compare_cell(record.id, record, read_results(out).records[0])
    assert same.verdict is Verdict.NO_CHANGE
    worse = read_results(out).records[0]
    worse.capacity = {**worse.capacity, "max_load": cap["max_load"] / 2, "max_request_rate": cap["max_request_rate"] / 2}
    verdicts = {m.metric: m.verdict for m in compare_cell(record.id, record, worse).metrics}
    assert verdicts["capacity.max_load"] is Verdict.REGRESSION


def test_a_budget_too_small_says_it_did_not_converge(tmp_path, suite, monkeypatch) -> None:
    monkeypatch.setattr(capacity_probe, "run_child", FakeChild())
    # the fake probes take no time: a max load below the edge stops the search instead
    code = main(["capacity", "--suite", str(suite), "--out", str(tmp_path / "c.json"), "--max-load", "1.5"])
    assert code == cli_capacity.NOT_CONVERGED
    cap = read_results(tmp_path / "c.json").records[0].capacity
    assert cap["converged"] is False and "at least" in cap["why"] and cap["max_load"] == 1.5


def test_a_probe_of_several_cells_is_refused_naming_the_fix(tmp_path, suite, monkeypatch) -> None:
    monkeypatch.setattr(capacity_probe, "run_child", FakeChild(cells=2))
    with pytest.raises(SystemExit, match="exactly one cell, it ran 2.*Narrow the matrix options"):
        main(["capacity", "--suite", str(suite), "--out", str(tmp_path / "c.json")])


def test_after_the_bracket_each_probe_goes_to_the_fitted_crossing(tmp_path, suite, monkeypatch) -> None:
    child = FakeChild(noise=0.0)
    monkeypatch.setattr(capacity_probe, "run_child", child)
    main(["capacity", "--suite", str(suite), "--out", str(tmp_path / "c.json"), "--start", "1", "--resolution", "0.5"])
    loads = [child.load_of(a) for a in child.argvs]
    assert loads[:3] == [1.0, 2.0, 4.0]  # 4 missed: the bracket
    assert all(abs(x - EDGE) <= 0.25 for x in loads[3:]), loads  # then at and about the crossing


def test_bad_settings_are_usage_errors(tmp_path, suite, capsys) -> None:
    with pytest.raises(SystemExit):
        main(["capacity", "--suite", str(suite), "--resolution", "nan"])
    assert "--resolution: must be a finite number > 0" in capsys.readouterr().err
    # issue 38 (7): refused by the search's settings, not argparse, and still a usage error: exit 2, as documented
    for argv, match in ((["--confidence", "1"], "confidence must be in"),
                        (["--target", "1.5"], "target attainment must be in"),
                        (["--target", "1"], "target attainment must be in"),
                        (["--min-load", "10", "--max-load", "1"], "must lie in")):
        with pytest.raises(SystemExit) as stop:
            main(["capacity", "--suite", str(suite), "--out", str(tmp_path / "c.json"), *argv])
        assert stop.value.code == cli_capacity.USAGE == 2, argv
        assert match in capsys.readouterr().err, argv
    assert not (tmp_path / "c.json").exists() and not (tmp_path / "c-probes").exists()


def test_each_probe_runs_the_policy_asked_for() -> None:
    """Issue 27: `batchperf capacity … --batchperf-policies aimd` searches the aimd cell: every probe gets it."""
    import argparse

    from batchperf.cli.capacity import add_cli_args, probes_of

    parser = argparse.ArgumentParser()
    add_cli_args(parser)
    args = parser.parse_args(["--batchperf-backends", "continuous", "--batchperf-policies", "aimd:decrease=0.7",
                              "--batchperf-load", "3"])
    argv = probes_of(args, Path("probes")).command(1.5, Path("p.json"))
    assert "--batchperf-policies=aimd:decrease=0.7" in argv and argv[-1] == "--batchperf-load=1.5,64"
    assert not [a for a in argv if a.startswith("--batchperf-load=3")]


def test_an_out_under_a_file_is_a_usage_error(tmp_path, suite, monkeypatch, capsys) -> None:
    """Issue 38 (7): `--out README.md/x.json` was a NotADirectoryError traceback."""
    monkeypatch.setattr(capacity_probe, "run_child", FakeChild())
    (tmp_path / "README.md").write_text("a file\n")
    for option in ("--out", "--probes-dir"):
        with pytest.raises(SystemExit) as stop:
            main(["capacity", "--suite", str(suite), "--out", str(tmp_path / "c.json"),
                  option, str(tmp_path / "README.md" / "x.json")])
        assert stop.value.code == 2
        assert f"{tmp_path / 'README.md'} is not a folder" in capsys.readouterr().err


def test_a_second_search_into_one_out_is_refused_unless_forced(tmp_path, suite, monkeypatch, capsys) -> None:
    """Issue 38 (7): the later result silently replaced the earlier one."""
    child = FakeChild()
    monkeypatch.setattr(capacity_probe, "run_child", child)
    out = tmp_path / "cap.json"
    argv = ["capacity", "--suite", str(suite), "--out", str(out), "--budget-min", "5"]
    assert main(argv) == 0
    first, ran = out.read_bytes(), len(child.argvs)
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2 and len(child.argvs) == ran and out.read_bytes() == first  # nothing ran
    assert "give another --out" in capsys.readouterr().err
    assert main([*argv, "--force"]) == 0 and len(child.argvs) > ran
    assert len(list((tmp_path / "cap-probes").glob("*.json"))) == len(child.argvs) - ran  # the old probes went


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_during_a_probe_exits_128_plus_it_keeping_the_finished_probes(
        tmp_path, suite, monkeypatch, capsys, signum) -> None:
    """Issue 38 (8): SIGTERM or Ctrl-C during a probe exited 1 ("the probe wrote no results ... run it alone").
    The third probe is a real child (a sleeping Python) that the signal reaches through the launcher."""
    fake = FakeChild()
    real = capacity_probe.run_child
    calls: list[int] = []

    def child(argv: list[str]) -> int:
        calls.append(1)
        if len(calls) < 3:
            return fake(argv)
        threading.Timer(0.5, os.kill, (os.getpid(), signum)).start()
        return real([sys.executable, "-c", "import time; time.sleep(30)"])

    monkeypatch.setattr(capacity_probe, "run_child", child)
    out = tmp_path / "cap.json"
    began = time.monotonic()
    code = main(["capacity", "--suite", str(suite), "--out", str(out), "--budget-min", "5"])
    assert code == 128 + signum and time.monotonic() - began < 20  # the sleeping child was stopped
    err = capsys.readouterr().err
    assert "interrupted" in err and "2 finished probe(s) are kept" in err and str(tmp_path / "cap-probes") in err
    assert f"batchperf capacity --from-probes {tmp_path / 'cap-probes'} --out {out}" in err
    assert len(list((tmp_path / "cap-probes").glob("probe0[12]-load*.json"))) == 2 and not out.exists()


def test_from_probes_writes_what_the_search_wrote_without_running_a_probe(tmp_path, suite, monkeypatch, capsys) -> None:
    """`--from-probes DIR` reads a search's kept probes back: the same capacity section (but the seconds, which the
    files tell), for a search that converged and one stopped by --max-load; nothing runs; --out is kept unless
    --force, the probes always."""
    child = FakeChild()
    monkeypatch.setattr(capacity_probe, "run_child", child)
    for name, extra in (("conv", ["--resolution", "0.1"]), ("max", ["--max-load", "1.5"])):
        out = tmp_path / f"{name}.json"
        searched = main(["capacity", "--suite", str(suite), "--out", str(out), "--budget-min", "5", *extra])
        written = read_results(out).records[0].capacity
        ran = len(child.argvs)
        with pytest.raises(SystemExit) as stop:  # the search's own result is there: refused, nothing lost
            main(["capacity", "--from-probes", str(tmp_path / f"{name}-probes"), *extra])
        assert stop.value.code == 2 and "--force" in capsys.readouterr().err
        again = main(["capacity", "--from-probes", str(tmp_path / f"{name}-probes"), "--force", *extra])
        assert again == searched and len(child.argvs) == ran  # no probe ran
        restated = read_results(out).records[0].capacity
        assert {k: v for k, v in restated.items() if k != "search_s"} == \
            {k: v for k, v in written.items() if k != "search_s"}
        assert restated["search_s"] >= 0 and len(list((tmp_path / f"{name}-probes").glob("*.json"))) == ran
        assert f"from the {written['probes']} probes" in capsys.readouterr().out
        child.argvs.clear()
    assert written["stopped"] == "max_load"  # the second search's


def test_from_probes_of_a_cut_search_says_where_its_probes_ended(tmp_path, suite, monkeypatch, capsys) -> None:
    """The probes of a search stopped after its bracket and two placed probes: a record that says it did not
    converge, why, and exit 3; a probe a stop cut (-interrupted) is not read; no probes, or no folder, are errors
    that name the folder."""
    monkeypatch.setattr(capacity_probe, "run_child", FakeChild())
    main(["capacity", "--suite", str(suite), "--out", str(tmp_path / "cap.json"), "--resolution", "0.1"])
    folder = tmp_path / "cap-probes"
    files = sorted(folder.glob("probe*.json"))
    for path in files[5:]:
        path.unlink()
    files[4].replace(files[4].with_name(files[4].stem + "-interrupted.json"))  # the cut one: not a probe
    code = main(["capacity", "--from-probes", str(folder), "--out", str(tmp_path / "cut.json")])
    cap = read_results(tmp_path / "cut.json").records[0].capacity
    assert code == cli_capacity.NOT_CONVERGED and cap["probes"] == 4 and cap["stopped"] == "probes"
    assert cap["converged"] is False and "probes folder" in cap["why"] and "interval_low" in cap
    assert "NOT converged" in capsys.readouterr().out
    for path in sorted(folder.glob("probe0[2-9]*.json")):  # the first probe alone, at load 1, met: no bracket
        path.unlink()
    with pytest.raises(SystemExit, match=r"1 probe\(s\) all met the target 90% \(loads 1\): they never bracketed"):
        main(["capacity", "--from-probes", str(folder), "--out", str(tmp_path / "none.json")])
    assert not (tmp_path / "none.json").exists()
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit, match="empty: no probe results"):
        main(["capacity", "--from-probes", str(tmp_path / "empty")])
    with pytest.raises(SystemExit) as stop:
        main(["capacity", "--from-probes", str(tmp_path / "nowhere")])
    assert stop.value.code == 2 and "no such folder" in capsys.readouterr().err
