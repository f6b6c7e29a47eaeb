"""``fcfs``: the engine's scheduling before policies existed, and the default.

The running cap is the cell's batch size; waiting requests are admitted in queue order (priority first, lower
first, FIFO within a priority, a preempted request back at the head); when KV blocks run out the newest running
request is preempted. Every decision is :class:`~batchperf.engine.policies.base.Policy`'s own.
"""

from __future__ import annotations

from batchperf.engine.policies.base import Policy


class Fcfs(Policy):
    name = "fcfs"
