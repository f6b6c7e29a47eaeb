"""The one loop every backend runs: each request's tenant, priority and due time reach its trace, whatever the backend."""

from __future__ import annotations

from fake_runs import OneTokenRun

from batchperf.backends.drive import drive
from batchperf.measure.clock import RunClock
from batchperf.measure.trace import RequestTrace
from batchperf.workload.spec import Arrival, LengthSpec, RequestSpec, Workload, WorkloadSpec


def run(workload: Workload) -> list[RequestTrace]:
    clock = RunClock(None)
    return drive("instant", workload, 1, 1, clock, OneTokenRun(clock, blocking_step=False)).requests


def test_tenant_priority_and_due_are_copied_from_the_spec_into_every_trace() -> None:
    spec = WorkloadSpec(2, LengthSpec(1, 1), output_lens=(1,))
    requests = (RequestSpec(0, (1,), 1, 0.0, tenant="chat", priority=0),
                RequestSpec(1, (2,), 1, 0.02, tenant="batch", priority=3))
    traces = run(Workload(spec, requests, unlimited=True))
    assert [(t.tenant, t.priority, t.due) for t in traces] == [("chat", 0, 0.0), ("batch", 3, 0.02)]
    assert traces[1].sent >= traces[1].due  # sent when it was due, or later: never early


def test_a_closed_loop_request_has_no_due_time_and_a_rate_one_has() -> None:
    closed = WorkloadSpec(2, LengthSpec(1, 1), output_lens=(1,)).build(100, 64)
    assert [t.due for t in run(closed)] == [None, None]
    rate = WorkloadSpec(2, LengthSpec(1, 1), output_lens=(1,), arrival=Arrival("rate", 100.0)).build(100, 64)
    assert [t.due for t in run(rate)] == [r.offset for r in rate.requests]
