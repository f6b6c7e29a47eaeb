"""The designs of ``batchperf ab``: how one pair's two pytest processes run (docs/ab.md, "Designs").

- *sequential* (:func:`run_cells`): one fresh pytest process per side per pair, one after the other.
- *resident* (:func:`run_resident`): both processes at once, as resident workers taking turns at the round gate
  (:mod:`batchperf.launch.round_gate`), so neither measures while the other does.
- *duet* (:func:`run_resident` with ``duet``, :func:`duet_cores`): both measure at the same time, each pinned to a
  core of its own.

Each side's process leaves the same files (:class:`~batchperf.ab.env.SideRun`): ``STEM.json`` (results),
``STEM.xml`` (junit), ``STEM.log``.
"""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from batchperf.ab.env import Environment, EnvironmentProblem, SideRun, outcomes
from batchperf.ab.outdir import create_new
from batchperf.launch.child import finish_guarded, run_guarded, start_guarded
from batchperf.launch.round_gate import RoundCoordinator, WorkerGone


def run_cells(env: Environment, args: Sequence[str], stem: Path, timeout_s: float | None = None) -> SideRun:
    """One pytest process of ``env`` on the cells: ``STEM.json`` (results), ``STEM.xml`` (junit), ``STEM.log``.

    It runs under the group guard (:mod:`batchperf.launch.child`): stopped with its whole process group after
    ``timeout_s``, on SIGINT/SIGTERM to this process (then :class:`~batchperf.launch.child.Stopped` is raised), and
    when this process dies."""
    results, junit, log = stem.with_suffix(".json"), stem.with_suffix(".xml"), stem.with_suffix(".log")
    for path in (results, junit):  # pytest writes these, following links: nothing may be there before it runs
        if os.path.lexists(path):
            raise FileExistsError(errno.EEXIST, "is there already, before its process ran (planted?)", str(path))
    cmd = env.pytest_command(args, results, junit)
    started, clock = time.time(), time.monotonic()
    with os.fdopen(create_new(log), "w", encoding="utf-8") as fh:
        fh.write("$ " + " ".join(cmd) + "\n")
        fh.flush()
        done = run_guarded(cmd, cwd=env.dir, env=env.process_env(), stdout=fh, timeout_s=timeout_s)
    return SideRun(env.label, done.returncode, time.monotonic() - clock, results if results.exists() else None, log,
                   outcomes(junit), started, done.timed_out)


def run_resident(envs: Mapping[str, Environment], args: Sequence[str], stems: Mapping[str, Path],
                 order: tuple[str, str], cells: Sequence[str], timeout_s: float | None = None,
                 duet: bool = False) -> dict[str, SideRun]:
    """One process of each environment at once, as **resident workers taking turns** (``ab --design resident``).

    Both start together (their imports and model builds overlap: nothing is measured then) and each holds at the
    round gate (:mod:`batchperf.launch.round_gate`) before every round of a cell, warm-up included, and after its
    last. When both wait at the same round, they are released one after the other, ``order`` first and then
    alternating (A B | B A | A B …), so neither measures while the other does and the two sides' rounds lie
    seconds apart. When they wait at different points (a cell one side skipped or failed), the side behind in
    ``cells`` (the collection order) goes alone; a side that ended leaves the other to run on alone. Each side's
    files are :func:`run_cells`'s; ``timeout_s`` bounds the pair as a whole (both are stopped when it passes).

    ``duet`` (``ab --design duet``): both sides measure **at the same time**, each pinned to a core of its own
    (``order[0]`` the first of this process's cores, ``order[1]`` the second: the order swaps every pair, and so
    do the cores), released together at each round."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    files = _side_files(stems, order)
    cores = duet_cores(order) if duet else {}
    sockets = Path(tempfile.mkdtemp(prefix="batchperf-gate-"))
    sides = _Sides(order, files, {label: RoundCoordinator(sockets / label) for label in order}, deadline)
    try:
        _start(sides, envs, args, cores, duet)
        timed_out = _take_turns(sides, cells, duet)
        codes = _finish(sides, timed_out)
    except BaseException:
        for proc in sides.procs.values():
            finish_guarded(proc, stop=True)
        raise
    finally:
        for gate in sides.gates.values():
            gate.close()
        for fh in sides.logs.values():
            fh.close()
        with contextlib.suppress(OSError):
            sockets.rmdir()
    return {label: SideRun(label, codes[label][0], sides.ended[label] - sides.clocks[label],
                           files[label][".json"] if files[label][".json"].exists() else None, files[label][".log"],
                           outcomes(files[label][".xml"]), sides.started[label], codes[label][1],
                           sides.at.get(label, "")) for label in order}


@dataclass(slots=True)
class _Sides:
    """The two workers of one resident pair: their files and gates, and what is known of each process so far."""

    order: tuple[str, str]
    files: dict[str, dict[str, Path]]  # label -> suffix (.json, .xml, .log) -> path
    gates: dict[str, RoundCoordinator]
    deadline: float | None  # time.monotonic() by which the whole pair must be done
    procs: dict[str, Any] = field(default_factory=dict)
    logs: dict[str, Any] = field(default_factory=dict)
    started: dict[str, float] = field(default_factory=dict)  # time.time() at start
    clocks: dict[str, float] = field(default_factory=dict)  # time.monotonic() at start
    ended: dict[str, float] = field(default_factory=dict)  # time.monotonic() when its gate closed or it exited
    at: dict[str, str] = field(default_factory=dict)  # label -> the cell its worker last named at its gate

    def hear(self, label: str) -> str | None:
        """What ``label``'s worker says at its gate next; None once it has closed (the process ended)."""
        left = 1e9 if self.deadline is None else self.deadline - time.monotonic()
        try:
            said = self.gates[label].next(lambda: self.procs[label].poll() is None, max(left, 0.0))
        except WorkerGone:
            self.ended.setdefault(label, time.monotonic())
            return None
        self.at[label] = said.partition(" ")[2]
        return said

    def release(self, label: str) -> None:
        """Let ``label``'s worker go; a worker that died while it waited is heard as ended at its next
        :meth:`hear` (WorkerGone), never a broken pipe here."""
        try:
            self.gates[label].go()
        except WorkerGone:
            self.ended.setdefault(label, time.monotonic())


def _side_files(stems: Mapping[str, Path], order: tuple[str, str]) -> dict[str, dict[str, Path]]:
    """Each side's results, junit and log paths; FileExistsError when pytest's files are there before it runs."""
    files = {label: {k: stems[label].with_suffix(k) for k in (".json", ".xml", ".log")} for label in order}
    for label in order:
        for path in (files[label][".json"], files[label][".xml"]):
            if os.path.lexists(path):
                raise FileExistsError(errno.EEXIST, "is there already, before its process ran (planted?)", str(path))
    return files


def _start(sides: _Sides, envs: Mapping[str, Environment], args: Sequence[str], cores: Mapping[str, frozenset[int]],
           duet: bool) -> None:
    """Start both workers, ``order`` first, each holding at its own gate (a duet's pinned to its core)."""
    order, files, gates = sides.order, sides.files, sides.gates
    procs, logs, started, clocks = sides.procs, sides.logs, sides.started, sides.clocks
    for label in order:
        env = envs[label]
        cmd = env.pytest_command(args, files[label][".json"], files[label][".xml"])
        logs[label] = os.fdopen(create_new(files[label][".log"]), "w", encoding="utf-8")
        logs[label].write("$ " + " ".join(cmd) + "\n")
        logs[label].flush()
        started[label], clocks[label] = time.time(), time.monotonic()
        procs[label] = start_guarded(cmd, cwd=env.dir, env=dict(env.process_env(), **dict([gates[label].env()])),
                                     stdout=logs[label], cpus=cores[label] if duet else None)


def _take_turns(sides: _Sides, cells: Sequence[str], duet: bool) -> bool:
    """Release the workers' rounds until both have ended (run_resident's turns); True when the pair's time ran out."""
    order, deadline, hear = sides.order, sides.deadline, sides.hear
    said = {label: hear(label) for label in order}
    turns = 0  # paired releases since both last passed an end
    while any(said.values()):
        if deadline is not None and time.monotonic() > deadline:
            return True
        live = [label for label in order if said[label] is not None]
        if len(live) == 2 and said[live[0]] == said[live[1]]:
            ending = str(said[live[0]]).startswith("end ")
            together = duet or ending
            for label in (order if turns % 2 == 0 or together else order[::-1]):
                sides.release(label)
                if not together:
                    said[label] = hear(label)
            if together:  # both at once: a duet's round, or what follows an end (the next cell, the exit)
                said = {label: hear(label) for label in order}
            turns = 0 if ending else turns + 1
            continue
        label = min(live, key=lambda lb: _position(str(said[lb]), cells))
        sides.release(label)
        said[label] = hear(label)
    return False


def _finish(sides: _Sides, timed_out: bool) -> dict[str, tuple[int, bool]]:
    """Wait for both workers (stopping them when the pair timed out): label -> (exit code, timed out)."""
    codes = {}
    for label in sides.order:
        left = None if sides.deadline is None else max(sides.deadline - time.monotonic(), 0.0)
        done = finish_guarded(sides.procs[label], left, stop=timed_out)
        codes[label] = (done.returncode, done.timed_out or timed_out)
        sides.ended.setdefault(label, time.monotonic())
    return codes


def duet_cores(order: tuple[str, str]) -> dict[str, frozenset[int]]:
    """A duet's cores: the first two this process may run on, ``order[0]`` on the first. EnvironmentProblem when
    there are fewer than two."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        raise EnvironmentProblem(f"--design duet pins A and B to a core each and needs two; this process may use "
                                 f"{len(cores)} ({cores}); use --design resident")
    return {order[0]: frozenset({cores[0]}), order[1]: frozenset({cores[1]})}


def _position(message: str, cells: Sequence[str]) -> tuple[int, int]:
    """Where a gate message stands in the run: (the cell's index in the collection order, 0 at a round / 1 at its
    end); a cell not in the list counts as first, so it is never left waiting."""
    what, _, cell = message.partition(" ")
    return (cells.index(cell) if cell in cells else -1, 1 if what == "end" else 0)
