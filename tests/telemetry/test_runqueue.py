"""The CPU wait share of a cell's threads, from the kernel's schedstat: the arithmetic on fake readings, the
reading of a /proc tree, and this machine's own /proc where it keeps schedstats."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from batchperf.telemetry.runqueue import thread_counts, wait_share
from batchperf.telemetry.sampler import Sampler


def test_the_wait_share_is_the_waits_over_the_runnable_time_of_every_thread() -> None:
    before = {(1, 1): (100, 10), (1, 2): (50, 0), (1, 3): (10, 10)}
    after = {(1, 1): (400, 110),  # ran 300, waited 100
             (1, 2): (5, 1),  # a tid reused by a new thread: counts from 0 (ran 5, waited 1)
             (1, 4): (95, 99)}  # new: from 0; (1, 3) ended and took its counts with it
    assert wait_share(before, after) == pytest.approx(200 / 600)
    assert wait_share(before, after, leave_out=[(1, 4)]) == pytest.approx(101 / 406)
    assert wait_share(None, after) is None and wait_share(before, None) is None
    assert wait_share(before, before) is None  # nothing ran: no share, not 0


def write_task(proc: Path, pid: int, tid: int, text: str) -> None:
    (proc / str(pid) / "task" / str(tid)).mkdir(parents=True)
    (proc / str(pid) / "task" / str(tid) / "schedstat").write_text(text)


def test_threads_are_read_from_a_proc_tree_and_what_cannot_be_read_is_left_out(tmp_path: Path) -> None:
    write_task(tmp_path, 7, 7, "1000 200 3\n")
    write_task(tmp_path, 7, 8, "garbage\n")  # unreadable: left out
    write_task(tmp_path, 9, 9, "50 5 1\n")
    assert thread_counts([7, 9, 7, 12], proc=tmp_path) == {(7, 7): (1000, 200), (9, 9): (50, 5)}  # 12: gone
    assert thread_counts([12], proc=tmp_path) is None  # nothing readable: no schedstats here
    (tmp_path / "11" / "task" / "11").mkdir(parents=True)  # a kernel without schedstats: the file is missing
    assert thread_counts([11], proc=tmp_path) is None


@pytest.mark.skipif(not Path(f"/proc/{os.getpid()}/schedstat").exists(), reason="this kernel keeps no schedstats")
def test_this_process_threads_are_counted_and_a_cell_records_its_share() -> None:
    worker = threading.Thread(target=sum, args=(range(2_000_000),))
    first = thread_counts([os.getpid()])
    worker.start()
    worker.join()
    then = thread_counts([os.getpid()])
    assert first is not None and then is not None
    me = (os.getpid(), threading.get_native_id())
    assert then[me][0] > first[me][0]  # this thread ran between the readings
    with Sampler(interval_s=0.01) as sampler:
        sum(range(2_000_000))
    share = sampler.summary(output_tokens=10)["cpu_wait_share"]
    assert 0.0 <= share < 1.0
