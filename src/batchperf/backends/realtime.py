"""The client's threads scheduled ahead of the machine's other work while a server cell runs, so that it reads on time.

On a loaded machine (vLLM's CPU engine busy-polls a core; other jobs share the rest) the client's event-loop
thread wakes when a message arrives and then *waits for a core*: measured on the 2-core CI-class VM at load
average ~10, the client thread spent 2.4-6.7 s of a 6-8 s concurrency-1 run runnable but not running, for
0.2-0.4 s of CPU, and read the first token 25-55 ms after the server produced it (its loop lag P99 56-120 ms).
Under ``SCHED_FIFO`` (priority 1, the lowest real-time one) the same thread waited 1-4 ms in all and its loop
lag P99 was 1 ms. The client uses a few percent of a core, so the server loses little; ``SCHED_RESET_ON_FORK``
keeps any process the thread starts (a server) out of the real-time class, and the kernel's real-time
throttling (``sched_rt_runtime_us``) bounds a runaway. It needs ``CAP_SYS_NICE`` (root); without it the
client runs as before and the record says why (the client-lag check then tells when it fell behind).
``BATCHPERF_CLIENT_REALTIME=0`` turns it off.
"""

from __future__ import annotations

import os

ENV = "BATCHPERF_CLIENT_REALTIME"
PRIORITY = 1


def raise_thread() -> tuple[tuple[int, int] | None, str]:
    """Put the calling thread in ``SCHED_FIFO``; (its previous (policy, priority) to restore, or None, and what
    it runs under now, in words)."""
    if os.environ.get(ENV, "1") == "0":
        return None, f"normal scheduling (${ENV}=0)"
    if not hasattr(os, "sched_setscheduler"):
        return None, "normal scheduling (no sched_setscheduler on this platform)"
    previous = (os.sched_getscheduler(0), os.sched_getparam(0).sched_priority)
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO | os.SCHED_RESET_ON_FORK, os.sched_param(PRIORITY))
    except PermissionError:
        return None, "normal scheduling (SCHED_FIFO needs CAP_SYS_NICE: run as root to read on time under load)"
    return previous, f"SCHED_FIFO priority {PRIORITY}"


def restore_thread(previous: tuple[int, int] | None) -> None:
    if previous is not None:
        os.sched_setscheduler(0, previous[0], os.sched_param(previous[1]))
