"""How long a cell's threads waited for a CPU: the machine busy with other work, seen from inside the cell.

Linux keeps, for every thread, the time it ran and the time it sat on a run queue, ready to run but waiting for a
CPU (``/proc/<pid>/task/<tid>/schedstat``: run ns, wait ns, time slices). Over a cell's round, the **wait share**

    Σ wait / Σ (run + wait)    over every thread of the cell's process tree

is the part of its runnable time the cell lost to others. On a quiet machine it is what the cell's own threads take
from each other (a few percent on the CPU tier's 2 cores); two busy loops beside a one-thread cell raise it towards
a half. It complements the machine probe (:mod:`batchperf.telemetry.probe`), which samples the machine for half a
second at a session's ends: a short probe can land on a moment a core is free (the scheduler hands it one while the
neighbours share the other), the wait share covers the whole round.

A thread that ended during the round takes its counts with it (the kernel folds them nowhere), so a cell whose
workers come and go reads low; a kernel without schedstats (``/proc/<pid>/schedstat`` missing), or a system without
``/proc``, gives no share (None), never 0.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

PROC = Path("/proc")
Counts = dict[tuple[int, int], tuple[int, int]]  # (pid, tid) -> (run ns, wait ns)


def thread_counts(pids: Iterable[int], proc: Path = PROC) -> Counts | None:
    """Run and wait ns of every thread of ``pids``; None where this system keeps no schedstats."""
    out: Counts = {}
    readable = False
    for pid in dict.fromkeys(pids):
        try:
            tasks = list((proc / str(pid) / "task").iterdir())
        except OSError:  # the process is gone, or no /proc
            continue
        for task in tasks:
            try:
                fields = (task / "schedstat").read_text().split()
                run, wait = int(fields[0]), int(fields[1])
            except (OSError, ValueError, IndexError):  # the thread ended between the listing and the read
                continue
            readable = True
            out[(pid, int(task.name))] = (run, wait)
    return out if readable else None


def wait_share(before: Mapping[tuple[int, int], tuple[int, int]] | None,
               after: Mapping[tuple[int, int], tuple[int, int]] | None,
               leave_out: Iterable[tuple[int, int]] = ()) -> float | None:
    """The share of the threads' runnable time between the two readings spent waiting for a CPU (module doc); a
    thread new in ``after`` counts from 0. None when either reading is missing or nothing ran."""
    if before is None or after is None:
        return None
    skip = set(leave_out)
    run = wait = 0
    for key, (r1, w1) in after.items():
        if key in skip:
            continue
        r0, w0 = before.get(key, (0, 0))
        if r1 < r0 or w1 < w0:  # a tid reused by a new thread: its counts began again
            r0 = w0 = 0
        run += r1 - r0
        wait += w1 - w0
    return wait / (run + wait) if run + wait > 0 else None
