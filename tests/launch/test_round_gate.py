"""The round gate's protocol (launch/round_gate.py): a worker waits at each round until the coordinator says go;
without a coordinator, or once it is gone, the worker runs on ungated."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from batchperf.launch import round_gate
from batchperf.launch.environ import ROUND_GATE_ENV
from batchperf.launch.round_gate import RoundCoordinator, WorkerGone


@pytest.fixture(autouse=True)
def fresh_link(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    link: list = []
    monkeypatch.setattr(round_gate, "_link", link)
    yield
    for sock in link:
        if sock is not None:
            sock.close()


def test_without_the_variable_a_worker_never_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ROUND_GATE_ENV, raising=False)
    round_gate.wait("round c")  # returns at once
    assert round_gate._link == []


def test_a_worker_waits_for_each_go_and_says_what_it_is_about_to_do(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    gate = RoundCoordinator(tmp_path / "g")
    monkeypatch.setenv(*gate.env())
    passed: list[str] = []

    def worker() -> None:
        for what in ("round c1", "round c1", "end c1"):
            round_gate.wait(what)
            passed.append(what)

    thread = threading.Thread(target=worker)
    thread.start()
    try:
        heard = [gate.next(thread.is_alive, 10)]
        for _ in range(2):
            time.sleep(0.05)
            assert len(passed) == len(heard) - 1  # held until the go
            gate.go()
            heard.append(gate.next(thread.is_alive, 10))
        gate.go()
        thread.join(10)
    finally:
        gate.close()
    assert heard == ["round c1", "round c1", "end c1"]
    assert passed == heard
    assert not (tmp_path / "g").exists()


def test_a_worker_runs_on_ungated_when_the_coordinator_closes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gate = RoundCoordinator(tmp_path / "g")
    monkeypatch.setenv(*gate.env())
    thread = threading.Thread(target=lambda: [round_gate.wait("round c") for _ in range(3)])
    thread.start()
    assert gate.next(thread.is_alive, 10) == "round c"
    gate.close()
    thread.join(10)
    assert not thread.is_alive()
    assert round_gate._link == [None]


def test_a_worker_whose_coordinator_is_gone_runs_ungated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ROUND_GATE_ENV, str(tmp_path / "nobody-listens"))
    round_gate.wait("round c")
    round_gate.wait("end c")
    assert round_gate._link == [None]


def test_the_coordinator_hears_a_worker_that_ended_or_stays_silent(tmp_path: Path) -> None:
    gate = RoundCoordinator(tmp_path / "g")
    try:
        with pytest.raises(WorkerGone, match="ended before"):
            gate.next(lambda: False, 5)
        with pytest.raises(WorkerGone, match="no word"):
            gate.next(lambda: True, 0.3)
        with pytest.raises(WorkerGone, match="no worker"):
            gate.go()
    finally:
        gate.close()


def test_a_socket_that_never_answers_fails_the_round_within_the_bound(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # a listener that accepts and then says nothing: once, this held a pytest run forever
    silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    silent.bind(str(tmp_path / "silent"))
    silent.listen(1)
    monkeypatch.setenv(ROUND_GATE_ENV, str(tmp_path / "silent"))
    monkeypatch.setattr(round_gate, "WAIT_S", 0.3)
    try:
        started = time.monotonic()
        with pytest.raises(round_gate.GateSilent, match=r"silent \(\$BATCHPERF_ROUND_GATE\) did not answer 'round' "
                                                        r"with 'go' within 0.3 s"):
            round_gate.wait("round c")
        assert time.monotonic() - started < 5
        round_gate.wait("end c")  # the later rounds run ungated, at once
        assert round_gate._link == [None]
    finally:
        silent.close()
