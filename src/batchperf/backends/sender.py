"""The client of a run: the feed's releases, sent on time even while the backend's step holds the driving thread.

Behind a server, the client sends each request when it is due whatever the engine is doing, and the engine
takes what arrived between its steps (vLLM's engine core drains its input queue before each step). An
in-process backend whose ``step`` holds the driving thread for a whole unit of work (an engine step, a whole
``generate`` batch: ``BackendRun.blocking_step``) cannot send then. So for an open-loop workload a *sender
thread* releases each request at its due time, stamps it sent (``RequestTrace.sent``, on the run's clock)
and leaves it in the inbox, which :func:`~batchperf.backends.drive.drive` drains before each step: the wait
for the step to end is then the engine's, and counts in TTFT (from the send, as ``vllm bench serve``), and
the send lag (sent − due) is the client's own.

The feed (:class:`~batchperf.backends.feed.RequestFeed`) is shared by the two threads under one condition: the
driving thread frees slots as requests end (and wakes the sender), and before each step it also sends what is
due by then itself (stamped then): a release into a slot just freed, which it learns of only after the step,
goes into the very next step as it always did, and a timed one the sender has not reached yet is sent late,
and its lag says so. A closed-loop workload (releases only at t0 and as slots free, which the driving thread
sees first) and a backend whose step returns by the next release (``until``) run without the thread, exactly
as before.

The sender's stamp reads the clock without a device synchronisation (a client's time; synchronising from
this thread would wait for the step's kernels). The thread runs ``SCHED_FIFO`` where allowed
(:mod:`batchperf.backends.realtime`, as the server client's), so that a loaded machine does not keep it from
a core when it wakes; it still needs the GIL, which the engine's Python code holds between its ops. A smaller
``sys.setswitchinterval`` than the default 5 ms did not shorten its lag on a loaded machine
(``studies/send-lag/send_lag_ab.py``; docs/traffic.md), so it is left alone. Its failure is raised in the driving thread
(at the next hand-over, or when the run ends); the driving thread's failure or an interrupt stops it.
"""

from __future__ import annotations

import threading
import time
from types import TracebackType
from typing import NamedTuple

from batchperf.backends.feed import RequestFeed
from batchperf.backends.realtime import raise_thread, restore_thread
from batchperf.measure.clock import RunClock
from batchperf.workload.spec import RequestSpec

THREAD_NAME = "batchperf-sender"
RECHECK_S = 1.0  # longest wait of the driving thread, idle, before it looks at the sender thread again
JOIN_S = 10.0  # how long stopping waits for the thread (it only ever waits on the condition)


class Sent(NamedTuple):
    """A request handed to a backend, with the two client times of :class:`~batchperf.measure.trace.RequestTrace`."""

    spec: RequestSpec
    arrival: float  # s: when the client released it (its offset passed and a concurrency slot was free)
    sent: float  # s: when the client sent it (where TTFT starts)


class Sender:
    """The feed behind a lock, its inbox, and (``threaded``) the thread that sends timed requests when due."""

    def __init__(self, backend: str, feed: RequestFeed, clock: RunClock, threaded: bool) -> None:
        self._backend = backend  # for messages
        self._feed = feed
        self._clock = clock
        self._cond = threading.Condition()
        self._inbox: list[Sent] = []
        self._error: BaseException | None = None
        self._stop = False
        self._thread = threading.Thread(target=self._run, name=THREAD_NAME, daemon=True) if threaded else None
        self.scheduling: str | None = None  # what the thread ran under, in words (None: no thread)

    def __enter__(self) -> Sender:
        if self._thread is not None:
            self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()
        if kind is None:  # a failure of the thread that the run did not meet before it ended
            self._raise_if_failed()

    def stop(self) -> None:
        if self._thread is None:
            return
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        self._thread.join(JOIN_S)
        if self._thread.is_alive():
            raise RuntimeError(f"{self._backend}: the sender thread did not stop within {JOIN_S:g} s")

    @property
    def done(self) -> bool:
        """Every request sent and completed."""
        with self._cond:
            return self._feed.done

    def next_release(self) -> float | None:
        """When the next request will be sent (None: not until one completes)."""
        with self._cond:
            return self._feed.next_release()

    def take(self) -> list[Sent]:
        """The requests sent since the last take, in order, then those due by now (sent now, by the caller)."""
        now = self._clock.now()
        with self._cond:
            self._raise_if_failed()
            taken, self._inbox = self._inbox, []
            taken += [Sent(spec, arrival, now) for spec, arrival in self._feed.poll(now)]
        return taken

    def complete(self, request_id: int, at: float) -> None:
        """The request ended at ``at``: its slot is free from then (the sender may fill it)."""
        with self._cond:
            self._feed.complete(request_id, at)
            self._cond.notify_all()

    def wait(self) -> None:
        """Nothing is in flight: wait until a request is sent (by the thread) or due (to be sent by ``take``)."""
        with self._cond:
            while not self._inbox:
                self._raise_if_failed()
                release = self._feed.next_release()
                if release is None:
                    raise RuntimeError(f"{self._backend}: nothing in flight and nothing to release; the feed is stuck")
                if self._thread is not None:  # the thread sends it and wakes this one
                    if not self._thread.is_alive():
                        raise RuntimeError(f"{self._backend}: the sender thread ended with requests left to send")
                    self._cond.wait(RECHECK_S)
                    continue
                delay = release - self._client_now()
                if delay <= 0:
                    return
                self._cond.wait(delay)

    def _client_now(self) -> float:
        """The run's clock without a device synchronisation: when the client acts."""
        return self._clock.since_start(time.perf_counter())

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise RuntimeError(f"{self._backend}: the sender thread failed: {self._error!r}") from self._error

    def _run(self) -> None:
        previous = None
        try:
            previous, self.scheduling = raise_thread()
            with self._cond:
                while not self._stop and not self._feed.all_released:
                    self._send_due()
        except BaseException as exc:  # raised in the driving thread; this thread just ends
            with self._cond:
                self._error = exc
                self._cond.notify_all()
        finally:
            restore_thread(previous)

    def _send_due(self) -> None:
        """(Holding the condition.) Send what is due now, or wait until something is or the feed changes."""
        now = self._client_now()
        release = self._feed.next_release()
        if release is None or release > now:
            self._cond.wait(None if release is None else release - now)
            return
        self._inbox += [Sent(spec, arrival, now) for spec, arrival in self._feed.poll(now)]
        self._cond.notify_all()
