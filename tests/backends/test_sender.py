"""The client sends on time while a backend's step holds the driving thread: an open-loop request due during a long
step is sent (stamped) when due and waits for the step in its TTFT; closed loops run as before; a failure of either
thread, or an interrupt, ends the run and its sender thread. No assertion depends on how long anything took: a
fake step blocks until the test has seen what it waits for."""

from __future__ import annotations

import threading

import pytest
from fake_runs import OneTokenRun

from batchperf.backends import sender as sender_module
from batchperf.backends.drive import drive
from batchperf.backends.feed import RequestFeed
from batchperf.measure.clock import RunClock
from batchperf.workload.spec import Arrival, LengthSpec, RequestSpec, Workload, WorkloadSpec

WAIT_S = 30.0  # a guard for a fake step that waits for the sender: reached only when the sender never sends


class BlockingRun(OneTokenRun):
    """A backend whose step holds the thread (an engine step): every request taken gets one token at its end."""


def open_loop(*offsets: float) -> Workload:
    """Requests due at ``offsets`` (s), no in-flight limit (a trace's)."""
    spec = WorkloadSpec(len(offsets), LengthSpec(1, 1), output_lens=(1,))
    return Workload(spec, tuple(RequestSpec(i, (i + 1,), 1, off) for i, off in enumerate(offsets)), unlimited=True)


def sender_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == sender_module.THREAD_NAME]


@pytest.fixture
def released(monkeypatch: pytest.MonkeyPatch) -> dict[int, tuple[threading.Event, list[str]]]:
    """request id -> (set when the feed releases it, the names of the threads that released it)."""
    seen: dict[int, tuple[threading.Event, list[str]]] = {i: (threading.Event(), []) for i in range(4)}
    real = RequestFeed.poll

    def poll(self: RequestFeed, now: float) -> list[tuple[RequestSpec, float]]:
        out = real(self, now)
        for spec, _ in out:
            event, names = seen[spec.request_id]
            names.append(threading.current_thread().name)
            event.set()
        return out

    monkeypatch.setattr(RequestFeed, "poll", poll)
    return seen


def test_a_request_due_during_a_long_step_is_sent_when_due_and_waits_for_the_step_in_its_ttft(released) -> None:
    def step(n: int) -> None:
        if n == 0 and not released[1][0].wait(WAIT_S):  # the first step lasts until request 1 has been sent
            raise AssertionError("request 1 was not sent while the step that was running when it was due ran")

    clock = RunClock(None)
    run = BlockingRun(clock, step)
    first, second = drive("blocking", open_loop(0.0, 0.05), 4, 4, clock, run).requests
    assert released[1][1] == [sender_module.THREAD_NAME]  # sent by the sender thread, not after the step
    assert second.due == 0.05 <= second.sent < run.step_ends[0]  # sent when due, during the step
    assert run.events == ["add0", "step", "add1", "step"]  # the engine took it between its steps
    assert second.token_times[0] == run.step_ends[1]
    assert second.ttft >= run.step_ends[0] - second.sent > 0  # the wait for the step counts in its TTFT
    assert first.sent >= first.due == 0.0


def test_a_closed_loop_runs_without_a_sender_thread_each_request_sent_as_a_slot_frees(released) -> None:
    threads_seen: list[list[threading.Thread]] = []
    clock = RunClock(None)
    run = BlockingRun(clock, lambda n: threads_seen.append(sender_threads()))
    workload = WorkloadSpec(3, LengthSpec(1, 1), output_lens=(1,)).build(100, 64)
    traces = drive("blocking", workload, 1, 1, clock, run).requests
    assert threads_seen == [[], [], []]
    assert run.events == ["add0", "step", "add1", "step", "add2", "step"]
    assert [t.arrival for t in traces] == [0.0, *run.step_ends[:2]]  # released when the previous one ended
    assert all(t.sent >= t.arrival and t.due is None for t in traces)
    assert all(names == ["MainThread"] for event, names in released.values() if event.is_set())


def test_open_loop_under_a_concurrency_cap_a_slot_freed_by_a_step_is_filled_before_the_next_step() -> None:
    spec = WorkloadSpec(2, LengthSpec(1, 1), output_lens=(1,), arrival=Arrival("rate", 1000.0))
    workload = Workload(spec, (RequestSpec(0, (1,), 1, 0.0), RequestSpec(1, (2,), 1, 0.0)))
    clock = RunClock(None)
    run = BlockingRun(clock)
    traces = drive("blocking", workload, 1, 1, clock, run).requests
    assert run.events == ["add0", "step", "add1", "step"]
    assert traces[1].arrival == run.step_ends[0] and traces[1].sent >= traces[1].arrival


def test_a_failure_of_the_sender_thread_fails_the_run_and_nothing_hangs(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse() -> None:
        raise OSError("no scheduler here")

    monkeypatch.setattr(sender_module, "raise_thread", refuse)
    clock = RunClock(None)
    run = BlockingRun(clock)
    with pytest.raises(RuntimeError, match="blocking: the sender thread failed: OSError") as caught:
        drive("blocking", open_loop(0.0, 0.2, 0.4), 4, 4, clock, run)
    assert isinstance(caught.value.__cause__, OSError)
    assert run.closed and sender_threads() == []


@pytest.mark.parametrize("failure", [ValueError("the step broke"), KeyboardInterrupt()])
def test_a_failed_or_interrupted_step_ends_the_run_and_stops_the_sender_thread(failure: BaseException) -> None:
    waiting: list[list[threading.Thread]] = []

    def step(n: int) -> None:
        waiting.append(sender_threads())  # alive, waiting for request 1, due an hour from now
        raise failure

    clock = RunClock(None)
    run = BlockingRun(clock, step)
    with pytest.raises(type(failure)):
        drive("blocking", open_loop(0.0, 3600.0), 4, 4, clock, run)
    assert [len(t) for t in waiting] == [1]
    assert run.closed and sender_threads() == []


def test_a_backend_whose_step_returns_by_the_next_release_sends_from_the_driving_thread(released) -> None:
    class WaitingRun(BlockingRun):
        blocking_step = False  # hf-continuous, vllm-server: the step waits for results until the next release

    clock = RunClock(None)
    run = WaitingRun(clock, lambda n: None)
    drive("waiting", open_loop(0.0, 0.01), 4, 4, clock, run)
    assert [names for _, names in (released[0], released[1])] == [["MainThread"], ["MainThread"]]
