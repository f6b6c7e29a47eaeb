"""``ab --design resident`` (ab/designs.run_resident) with real processes: a folder whose ``pytest.py`` is a fake worker
that speaks the round gate (QUICK_EXIT imports pytest from the working folder first), so the turns, the hand-over
between cells, a worker that dies and a pair that hangs are seen as the coordinator really runs them."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import pytest
from ab_fakes import CELLS, FakeEnvs

from batchperf.ab.designs import run_resident
from batchperf.ab.env import Environment
from batchperf.ab.run import run_ab
from batchperf.ab.settings import Settings

FAKE_PYTEST = textwrap.dedent("""
    import os, signal, sys, threading, time
    from batchperf.launch import round_gate

    def main():
        label, log = os.environ["FAKE_LABEL"], os.environ["FAKE_LOG"]
        rounds, die_after = int(os.environ["FAKE_ROUNDS"]), int(os.environ.get("FAKE_DIE_AFTER", "-1"))
        kill_at, round_s = int(os.environ.get("FAKE_KILL_AT", "-1")), float(os.environ.get("FAKE_ROUND_S", "0.03"))
        if os.environ.get("FAKE_HANG"):
            time.sleep(60)
        done = 0
        for cell in os.environ["FAKE_CELLS"].split(","):
            for r in range(rounds + 1):  # the warm-up, then the measured rounds
                if done == kill_at:  # SIGKILL while it waits at its gate for the other side's round to end
                    threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGKILL)).start()
                round_gate.wait(f"round {cell}")
                if done == die_after:
                    os._exit(3)
                start = time.monotonic()
                time.sleep(round_s)
                with open(log, "a") as fh:
                    fh.write(f"{label} {cell} {r} {start} {time.monotonic()} {min(os.sched_getaffinity(0))}\\n")
                done += 1
            round_gate.wait(f"end {cell}")
        out = next(a.split("=", 1)[1] for a in sys.argv if a.startswith("--benchmark-json="))
        with open(out, "w") as fh:
            fh.write("{}")
        return 0
""")


def envs(tmp_path: Path, cells: dict[str, str], **extra: dict[str, str]) -> dict[str, Environment]:
    folder = tmp_path / "env"
    folder.mkdir(exist_ok=True)
    (folder / "pytest.py").write_text(FAKE_PYTEST)
    (folder / "perf_tests").mkdir(exist_ok=True)
    made = {}
    for label in "AB":
        variables = {"FAKE_LABEL": label, "FAKE_LOG": str(tmp_path / "turns.log"), "FAKE_ROUNDS": "3",
                     "FAKE_CELLS": cells[label], **extra.get(label, {})}
        made[label] = Environment(label, Path(sys.executable), tuple(variables.items()), folder)
    return made


def turns(tmp_path: Path) -> list[tuple[str, str, int, float, float]]:
    rows = [line.split() for line in (tmp_path / "turns.log").read_text().splitlines()]
    return [(label, cell, int(r), float(a), float(b)) for label, cell, r, a, b, _ in rows]


def cores(tmp_path: Path) -> dict[str, set[int]]:
    found: dict[str, set[int]] = {}
    for line in (tmp_path / "turns.log").read_text().splitlines():
        label, *_, core = line.split()
        found.setdefault(label, set()).add(int(core))
    return found


def run(tmp_path: Path, made: dict[str, Environment], order: tuple[str, str], timeout_s: float | None = 60,
        duet: bool = False):
    stems = {label: tmp_path / f"pair-001-{label}" for label in "AB"}
    return run_resident(made, [], stems, order, ["c1", "c2"], timeout_s, duet=duet)


def test_rounds_alternate_in_turns_and_never_overlap(tmp_path: Path) -> None:
    runs = run(tmp_path, envs(tmp_path, {"A": "c1,c2", "B": "c1,c2"}), ("B", "A"))
    assert {label: (r.returncode, r.crashed) for label, r in runs.items()} == {"A": (0, False), "B": (0, False)}
    seen = turns(tmp_path)
    for cell in ("c1", "c2"):  # warm-up B A, then A B | B A | A B: the order swaps every round
        assert [t[0] for t in seen if t[1] == cell] == ["B", "A", "A", "B", "B", "A", "A", "B"]
    spans = sorted((start, end) for *_, start, end in seen)
    assert all(end <= nxt for (_, end), (nxt, _) in zip(spans, spans[1:]))  # one measures at a time
    assert runs["A"].results is not None and runs["A"].results.read_text() == "{}"


def test_a_cell_one_side_lacks_runs_alone_and_the_next_in_turns(tmp_path: Path) -> None:
    runs = run(tmp_path, envs(tmp_path, {"A": "c1,c2", "B": "c2"}), ("A", "B"))
    assert not any(r.crashed for r in runs.values())
    seen = turns(tmp_path)
    assert [t[0] for t in seen if t[1] == "c1"] == ["A"] * 4
    assert [t[0] for t in seen if t[1] == "c2"] == ["A", "B", "B", "A", "A", "B", "B", "A"]
    assert max(t[4] for t in seen if t[1] == "c1") <= min(t[3] for t in seen if t[1] == "c2")


def test_a_worker_that_dies_leaves_the_other_to_run_on(tmp_path: Path) -> None:
    runs = run(tmp_path, envs(tmp_path, {"A": "c1,c2", "B": "c1,c2"}, A={"FAKE_DIE_AFTER": "2"}), ("A", "B"))
    assert runs["A"].returncode == 3 and runs["A"].crashed
    assert runs["B"].returncode == 0 and not runs["B"].crashed
    assert sum(1 for t in turns(tmp_path) if t[0] == "B") == 8


def test_a_worker_killed_at_its_gate_ends_the_pair_with_its_signal_and_cell(tmp_path: Path) -> None:
    # B is killed while it waits for A's (long) round to end: the coordinator's go to B then meets a dead socket
    made = envs(tmp_path, {"A": "c1,c2", "B": "c1,c2"}, A={"FAKE_ROUND_S": "0.8"}, B={"FAKE_KILL_AT": "1"})
    runs = run(tmp_path, made, ("A", "B"))
    assert runs["B"].crashed and runs["B"].returncode in (137, -9)
    assert runs["B"].at == "c1"
    assert runs["A"].returncode == 0 and not runs["A"].crashed


def test_a_pair_past_its_time_is_stopped_and_marked(tmp_path: Path) -> None:
    runs = run(tmp_path, envs(tmp_path, {"A": "c1", "B": "c1"}, B={"FAKE_HANG": "1"}), ("A", "B"), timeout_s=3)
    assert all(r.timed_out and r.crashed for r in runs.values())
    assert all(r.seconds < 30 for r in runs.values())


def test_files_already_there_are_refused(tmp_path: Path) -> None:
    (tmp_path / "pair-001-B.json").write_text("planted")
    with pytest.raises(FileExistsError, match="planted"):
        run(tmp_path, envs(tmp_path, {"A": "c1", "B": "c1"}), ("A", "B"))


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="a duet needs two cores")
def test_a_duet_runs_both_sides_at_once_each_on_its_own_core(tmp_path: Path) -> None:
    runs = run(tmp_path, envs(tmp_path, {"A": "c1", "B": "c1"}), ("B", "A"), duet=True)
    assert not any(r.crashed for r in runs.values())
    seen = turns(tmp_path)
    for r in range(4):  # each round of A overlaps B's round of the same index
        (a,), (b,) = ([t for t in seen if t[0] == label and t[2] == r] for label in "AB")
        assert a[3] < b[4] and b[3] < a[4]
    first, second = sorted(os.sched_getaffinity(0))[:2]
    assert cores(tmp_path) == {"B": {first}, "A": {second}}  # order[0] on the first core


def test_ab_resident_with_a_worker_killed_fails_by_name_never_a_broken_pipe(tmp_path: Path) -> None:
    made = envs(tmp_path, {"A": "c1,c2", "B": "c1,c2"}, A={"FAKE_ROUND_S": "0.8"}, B={"FAKE_KILL_AT": "1"})
    fakes = FakeEnvs(cells=CELLS[:2])
    settings = Settings(made["A"], made["B"], (), tmp_path / "out", design="resident", warmup=False, rounds=3,
                        max_minutes=None, process_minutes=1.0)
    result = run_ab(settings, prober=fakes.probe, collector=fakes.collect)
    assert result.status == "failed" and result.exit_code == 4
    assert "environment B failed to run in pair 1 (killed by SIGKILL" in result.reason
    assert "at cell c1" in result.reason and "unexpected error" not in result.reason
