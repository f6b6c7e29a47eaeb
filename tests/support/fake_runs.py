"""A fake :class:`~batchperf.backends.drive.BackendRun` for the tests of the loop every backend runs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from batchperf.backends.drive import Finished, Sent
from batchperf.measure.clock import RunClock
from batchperf.measure.trace import RequestTrace


class OneTokenRun:
    """A backend whose step answers every request taken with one token at its end; its traces know nothing of
    tenants. ``blocking_step``: whether its step holds the driving thread (an engine step) or returns by the next
    release. ``during_step(n)`` runs inside the n-th step (from 0); ``events`` records adds and steps in order."""

    blocking_step = True

    def __init__(self, clock: RunClock, during_step: Callable[[int], None] = lambda n: None,
                 blocking_step: bool | None = None) -> None:
        self.clock, self.during_step = clock, during_step
        if blocking_step is not None:
            self.blocking_step = blocking_step
        self.pending: list[Sent] = []
        self.events: list[str] = []
        self.step_ends: list[float] = []
        self.closed = False

    def add(self, request: Sent) -> None:
        self.events.append(f"add{request.spec.request_id}")
        self.pending.append(request)

    @property
    def has_work(self) -> bool:
        return bool(self.pending)

    def step(self, until: float | None) -> list[Finished]:
        self.events.append("step")
        self.during_step(len(self.step_ends))
        now = self.clock.now()
        self.step_ends.append(now)
        done, self.pending = self.pending, []
        return [Finished(RequestTrace(s.request_id, s.prompt_len, s.target_len, a, sent, (now,), sent=sent), now)
                for s, a, sent in done]

    def kv_figures(self) -> dict[str, Any]:
        return {}

    def counters(self) -> dict[str, Any]:
        return {}

    def close(self) -> None:
        self.closed = True
