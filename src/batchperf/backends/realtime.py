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

The server client raises every other Python thread of its process with it (:func:`raise_process_threads`): a
thread left at normal priority (the suite's telemetry sampler, psutil every 50 ms) can be preempted by the
machine's other work while it holds the GIL, and the real-time loop then waits for it as long as it waits for a
core: a priority inversion through the GIL. In issue 39's study the loop stalled once for 23-270 ms in 10 of 25
runs with the sampler at normal priority; with the sampler real-time too, 5 of 5 runs were within 5% of the wire.
Only threads the interpreter knows (``threading.enumerate``) can hold the GIL for Python code; native threads
that never take it (a BLAS pool) are left alone, since spinning real-time they could starve the server.
"""

from __future__ import annotations

import os
import threading

from batchperf.launch.environ import CLIENT_REALTIME_ENV

PRIORITY = 1


def raise_thread() -> tuple[tuple[int, int] | None, str]:
    """Put the calling thread in ``SCHED_FIFO``; (its previous (policy, priority) to restore, or None, and what
    it runs under now, in words)."""
    if os.environ.get(CLIENT_REALTIME_ENV, "1") == "0":
        return None, f"normal scheduling (${CLIENT_REALTIME_ENV}=0)"
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


def raise_process_threads() -> tuple[dict[int, tuple[int, int]] | None, str]:
    """:func:`raise_thread`, then every other live Python thread of the process below its priority into
    ``SCHED_FIFO`` too; (each raised thread's native id and previous (policy, priority), to restore, or None when
    the calling thread could not be raised, and what the calling thread runs under now, in words)."""
    previous, words = raise_thread()
    if previous is None:
        return None, words
    me = threading.get_native_id()
    saved = {me: previous}
    for thread in threading.enumerate():
        tid = thread.native_id
        if tid is None or tid == me:
            continue
        try:
            policy, priority = os.sched_getscheduler(tid), os.sched_getparam(tid).sched_priority
            if policy & ~os.SCHED_RESET_ON_FORK in (os.SCHED_FIFO, os.SCHED_RR) and priority >= PRIORITY:
                continue  # already at the loop's priority or above
            os.sched_setscheduler(tid, os.SCHED_FIFO | os.SCHED_RESET_ON_FORK, os.sched_param(PRIORITY))
        except ProcessLookupError:  # it ended since the listing
            continue
        saved[tid] = (policy, priority)
    return saved, words


def restore_threads(saved: dict[int, tuple[int, int]] | None) -> None:
    """Put back what :func:`raise_process_threads` changed (threads that ended since are skipped)."""
    for tid, (policy, priority) in (saved or {}).items():
        try:
            os.sched_setscheduler(tid, policy, os.sched_param(priority))
        except ProcessLookupError:
            pass
