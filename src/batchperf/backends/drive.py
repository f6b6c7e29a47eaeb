"""The loop every backend runs: the client feed sends requests, the backend advances, traces come back.

A backend supplies one :class:`BackendRun` per run of a workload; :func:`drive`
does the rest, the same way for all of them: it starts the clock, hands each
request over once the client has sent it, waits for the next send while the
backend has nothing to do, frees a request's slot at the client when it ends,
and assembles the :class:`RunTrace`. What one ``step`` is belongs to the
backend: a whole ``generate`` batch (hf-static), one engine step (continuous,
vllm), or a wait for the next result (hf-continuous, vllm-server), which must
return by ``until`` so that the next request is sent on time. A step of the
first kind holds this thread past ``until`` (``blocking_step``): in an open-loop
workload a sender thread then sends each request when it is due, and the
backend takes it before its next step, as an engine behind a server does
(:mod:`batchperf.backends.sender`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, NamedTuple, Protocol

from batchperf.backends.feed import RequestFeed
from batchperf.backends.sender import Sender, Sent
from batchperf.measure.clock import RunClock
from batchperf.measure.trace import RequestTrace, RunTrace
from batchperf.workload.spec import RequestSpec, Workload


class Finished(NamedTuple):
    trace: RequestTrace
    freed_at: float  # s: when the client saw the request end; its concurrency slot is free from then


class BackendRun(Protocol):
    """One run of a backend, as :func:`drive` steers it."""

    # True: ``step`` holds the calling thread for its whole unit of work, whatever ``until`` (an engine step, a
    # generate batch); an open-loop workload's requests are then sent by a sender thread while it runs
    blocking_step: bool

    def add(self, request: Sent) -> None:
        """Take a request the client released at ``request.arrival`` and sent at ``request.sent`` (s; where
        TTFT starts, as vLLM's client stamps its ``start_time`` just before the POST). A client that sends
        from a task of its own (a server's) reads the clock there instead."""
        ...

    @property
    def has_work(self) -> bool:
        """Some request taken has not finished."""
        ...

    def step(self, until: float | None) -> list[Finished]:
        """Advance by one unit of work; return the requests that ended in it. A wait for results
        ends by ``until`` (s, the feed's next release; None: nothing is released until one ends)."""
        ...

    def kv_figures(self) -> dict[str, Any]:
        """The backend's KV figures of the completed run (``RunTrace.kv``)."""
        ...

    def counters(self) -> dict[str, Any]:
        """The engine counters of the completed run (``RunTrace.counters``,
        :func:`batchperf.measure.counters.round_counters`), read after ``close``."""
        ...

    def close(self) -> None:
        """Called after the run, completed or failed: leave the backend reusable (abort what is left)."""
        ...


def drive(backend: str, workload: Workload, batch_size: int, concurrency: int, clock: RunClock,
          run: BackendRun) -> RunTrace:
    """Run ``workload.requests`` through ``run`` as the client sends them; the run ends when its last request does."""
    feed = RequestFeed(workload.requests, workload.max_in_flight(concurrency))
    done: list[RequestTrace] = []
    specs: dict[int, RequestSpec] = {}
    try:
        clock.start()
        with Sender(backend, feed, clock, threaded=workload.open_loop and run.blocking_step) as sender:
            while not sender.done:
                for request in sender.take():
                    specs[request.spec.request_id] = request.spec
                    run.add(request)
                if not run.has_work:
                    sender.wait()
                    continue
                for trace, freed_at in run.step(sender.next_release()):
                    sender.complete(trace.request_id, freed_at)
                    done.append(with_workload_fields(trace, specs.pop(trace.request_id), workload.open_loop))
    finally:
        run.close()
    if not done:
        raise RuntimeError(f"{backend}: the run completed no request; nothing to measure")
    return RunTrace(
        backend=backend,
        batch_size=batch_size,
        concurrency=concurrency,
        requests=sorted(done, key=lambda t: t.request_id),
        end=max(t.finished for t in done),
        kv=run.kv_figures(),
        counters=run.counters(),
    )


def with_workload_fields(trace: RequestTrace, spec: RequestSpec, open_loop: bool) -> RequestTrace:
    """``trace`` with its request's tenant and priority and, open loop, the time it was due (every backend's)."""
    return replace(trace, tenant=spec.tenant, priority=spec.priority, due=spec.offset if open_loop else None)
