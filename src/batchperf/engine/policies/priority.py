"""``priority``: requests' priorities order admission, and an urgent arrival may preempt a less urgent request.

As vLLM's ``--scheduling-policy priority``: lower value = more urgent (the suite gives each request its
tenant's priority); ties are served in queue order (arrival order, a preempted request first).

- admission: the most urgent waiting request next;
- when the cap is full or the KV blocks are short, the waiting request preempts running requests of a strictly
  larger priority value, the least urgent and then the newest first, as many as make room and only if they
  do (recompute, as the engine preempts: blocks freed, the request back in the queue);
- when a running request needs blocks, the least urgent, then newest, running request not yet scheduled this
  step is preempted (vLLM: the max of (priority, arrival)).

No parameters.
"""

from __future__ import annotations

from collections.abc import Sequence

from batchperf.engine.policies.base import Policy
from batchperf.engine.request import Request


def _least_urgent_newest(requests: Sequence[Request]) -> list[Request]:
    """``requests`` (in admission order) from the least urgent to the most, the newest first within a priority."""
    return [r for _, r in sorted(enumerate(requests), key=lambda x: (x[1].priority, x[0]), reverse=True)]


class Priority(Policy):
    name = "priority"

    def select(self, waiting: Sequence[Request], running: Sequence[Request]) -> Request | None:
        return min(waiting, key=lambda r: r.priority) if waiting else None  # min keeps the first of a tie

    def victim(self, candidates: Sequence[Request]) -> Request:
        return _least_urgent_newest(candidates)[0]

    def displaceable(self, request: Request, running: Sequence[Request]) -> Sequence[Request]:
        return [r for r in _least_urgent_newest(running) if r.priority > request.priority]
