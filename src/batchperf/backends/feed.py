"""The client side of a run: releases requests to a backend as `vllm bench serve` would.

A request is *released* once its scheduled offset has passed and one of the
``max_in_flight`` slots is free (the ``--max-concurrency`` semaphore). Its
arrival time is ``max(offset, time its slot was freed)``: the moment the client
may send it, whether or not the backend was free to look. The client stamps
when it is actually sent (``RequestTrace.sent``; :mod:`batchperf.backends.sender`,
or a server client's request task just before its POST); TTFT counts from
there, and the gap is the client's own ``send_delay``.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from batchperf.workload.spec import RequestSpec


class RequestFeed:
    """FIFO release of requests under an in-flight limit; times are run-relative seconds."""

    def __init__(self, requests: Sequence[RequestSpec], max_in_flight: int) -> None:
        if max_in_flight < 1:
            raise ValueError(f"concurrency (max requests in flight) must be >= 1, got {max_in_flight}")
        self._pending = list(requests)
        self._next = 0
        self._free_slots = [0.0] * max_in_flight  # heap: when each slot became free
        self._in_flight: set[int] = set()

    @property
    def done(self) -> bool:
        """Every request sent and completed."""
        return self._next == len(self._pending) and not self._in_flight

    @property
    def all_released(self) -> bool:
        """Every request released (some may still be in flight)."""
        return self._next == len(self._pending)

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def next_release(self) -> float | None:
        """When the next request will be sent, or None if none can be until one completes."""
        if self._next == len(self._pending) or not self._free_slots:
            return None
        return max(self._pending[self._next].offset, self._free_slots[0])

    def poll(self, now: float) -> list[tuple[RequestSpec, float]]:
        """Requests released by ``now``, in order, each with its arrival time."""
        released = []
        while (at := self.next_release()) is not None and at <= now:
            heapq.heappop(self._free_slots)
            request = self._pending[self._next]
            self._next += 1
            self._in_flight.add(request.request_id)
            released.append((request, at))
        return released

    def complete(self, request_id: int, at: float) -> None:
        """The request finished at ``at``; its slot is free from then on."""
        self._in_flight.remove(request_id)
        heapq.heappush(self._free_slots, at)
