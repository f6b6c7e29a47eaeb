"""What a ``batchperf ab`` run holds, and writes to ``ab.json``: its cells (:mod:`batchperf.ab.cell`), the pairs, the
run (:class:`AbResult`), how it ended (:class:`Ended`) and its exit code. Judging the cells is
:mod:`batchperf.ab.judging`'s; the run, :mod:`batchperf.ab.run`'s."""

from __future__ import annotations

import datetime as dt
import signal
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

from batchperf.ab.cell import CellState
from batchperf.ab.env import Probe, SideRun
from batchperf.ab.kept import ServerStart
from batchperf.ab.looks import LookPlan
from batchperf.ab.settings import Settings
from batchperf.ab.stats import SequentialTest
from batchperf.ab.warmup import RoundsChoice, Warmup
from batchperf.regress.fingerprint import version_diff
from batchperf.regress.machine import SessionProbes
from batchperf.regress.verdict import Verdict

SCHEMA = 2  # 2: verdicts in the one vocabulary ("not comparable" is now "not judged")


@dataclass(slots=True)
class Pair:
    index: int  # 1-based
    order: tuple[str, str]
    runs: dict[str, SideRun]
    load_avg_1m: float | None
    machine: dict[str, SessionProbes] = field(default_factory=dict)  # each side's session probes, where it probed
    waits: dict[str, dict[str, float]] = field(default_factory=dict)  # side -> cell id -> its CPU wait share

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "order": list(self.order), "load_avg_1m": self.load_avg_1m,
                **{label: {"results": str(r.results) if r.results else None, "log": str(r.log),
                           "seconds": round(r.seconds, 2), "returncode": r.returncode, "started": r.started,
                           **({"probe": self.machine[label].to_dict()} if label in self.machine else {}),
                           **({"cpu_wait_share": self.waits[label]} if self.waits.get(label) else {})}
                   for label, r in self.runs.items()}}


ENDINGS = ("done", "budget", "interrupted", "failed")  # a run's status once it ended ("running" before)


@dataclass(frozen=True, slots=True)
class Ended:
    """How a run ended, as the stage that ended it returns it (the warm-up, the pairs, the budget, a stop signal);
    :func:`batchperf.ab.run.finish` applies it to the :class:`AbResult`, the one place that does."""

    status: str  # one of ENDINGS
    reason: str = ""  # why it stopped, for budget/interrupted/failed
    minutes_needed: int | None = None  # budget: the --max-minutes a verdict needs, when this one could not fit
    stop_signal: int | None = None  # interrupted: the signal's number

    def __post_init__(self) -> None:
        if self.status not in ENDINGS:
            raise ValueError(f"status: {self.status!r}; must be one of {', '.join(ENDINGS)}")
        if self.status != "done" and not self.reason:
            raise ValueError(f"reason: empty for status {self.status!r}; a run that stops early says why")
        if (self.stop_signal is not None) != (self.status == "interrupted"):
            raise ValueError(f"stop_signal: {self.stop_signal} with status {self.status!r}; an interrupted run, and "
                             "only one, names the signal that stopped it")


@dataclass(slots=True)
class AbResult:
    settings: Settings
    probes: dict[str, Probe]
    sequential_test: SequentialTest  # the test behind each deciding metric's interval (its level or boundaries)
    level_method: str
    cells: dict[str, CellState]
    pairs: list[Pair] = field(default_factory=list)
    status: str = "running"  # done, budget, interrupted, failed
    reason: str = ""  # why it stopped, for budget/interrupted/failed
    started: float = field(default_factory=time.time)
    elapsed_s: float = 0.0
    only_in: dict[str, list[str]] = field(default_factory=dict)  # environment label -> cells the other lacks
    stop_signal: int = signal.SIGINT  # what interrupted it (status "interrupted")
    design: str = "sequential"  # how each pair's processes run: settings.design, "auto" resolved by prepare()
    warmup: Warmup | None = None  # the discarded warm-up pair (None: the run stopped before it)
    rounds: RoundsChoice | None = None  # the rounds per process, given or chosen (None: not yet known)
    minutes_needed: int | None = None  # status budget: the --max-minutes a verdict needs, when this one could not fit
    kept_servers: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # --keep-servers: each side's, ended
    server_starts: list[ServerStart] = field(default_factory=list)  # --keep-servers: when fresh ones were started
    looks: LookPlan | None = None  # the looks planned for the pairs --max-minutes holds (None: for --max-pairs)

    @property
    def max_pairs(self) -> int:
        """The pairs the run may measure: the looks planned for, else ``--max-pairs``."""
        return self.looks.pairs if self.looks is not None else self.settings.max_pairs

    @property
    def versions_differ(self) -> dict[str, tuple[str, str]]:
        return version_diff(self.probes["A"].axes, self.probes["B"].axes)

    @property
    def vars_differ(self) -> dict[str, tuple[str, str]]:
        a, b = dict(self.settings.a.vars), dict(self.settings.b.vars)
        return {k: (a.get(k, "-"), b.get(k, "-")) for k in sorted(a.keys() | b.keys()) if a.get(k) != b.get(k)}

    @property
    def loads(self) -> list[float]:
        return [p.load_avg_1m for p in self.pairs if p.load_avg_1m is not None]

    @property
    def exit_code(self) -> int:
        return exit_code(self)

    def to_dict(self) -> dict[str, Any]:
        s = self.settings
        envs = {label: {"python": str(env.python), "vars": dict(env.vars), "dir": str(env.dir),
                        "fingerprint": self.probes[label].fingerprint.to_dict(), "axes": self.probes[label].axes}
                for label, env in (("A", s.a), ("B", s.b)) if label in self.probes}
        loads = self.loads
        return {
            "batchperf_ab": SCHEMA, "status": self.status, "reason": self.reason, "exit_code": self.exit_code,
            "started": dt.datetime.fromtimestamp(self.started, dt.timezone.utc).isoformat(timespec="seconds"),
            "elapsed_s": round(self.elapsed_s, 1), "minutes_needed": self.minutes_needed,
            "command": s.command,
            "settings": {"margin": s.margin, "margins": dict(s.margins), "metrics": list(s.metrics), "alpha": s.alpha,
                         **self.sequential_test.to_dict(), "level_method": self.level_method, "max_pairs": s.max_pairs,
                         "looks": self.looks.to_dict() if self.looks else None,
                         "max_minutes": s.max_minutes, "rounds": s.rounds, "warmup": s.warmup, "design": self.design,
                         "design_asked": s.design, "keep_servers": s.keep_servers,
                         "restart_servers_every": s.restart_servers_every if s.keep_servers else None,
                         "pytest_args": list(s.pytest_args)},
            "environments": envs,
            "versions_differ": {k: list(v) for k, v in self.versions_differ.items()} if len(self.probes) == 2 else {},
            "vars_differ": {k: list(v) for k, v in self.vars_differ.items()},
            "load_avg_1m": {"min": min(loads), "median": statistics.median(loads), "max": max(loads)} if loads else None,
            "only_in": self.only_in,
            "warmup": self.warmup.to_dict() if self.warmup else None,
            "rounds": self.rounds.to_dict() if self.rounds else None,
            "kept_servers": {label: [{"name": r.get("name"), "starts": r.get("starts"), "log": r.get("log")}
                                     for r in records] for label, records in self.kept_servers.items()},
            "server_starts": [start.to_dict() for start in self.server_starts],
            "pairs": [p.to_dict() for p in self.pairs],
            "cells": [c.to_dict() for c in self.cells.values()],
        }


def exit_code(result: AbResult) -> int:
    """0 no regression, 1 regression, 2 inconclusive at the budget, 4 a cell failed to run or was not judged (its
    environments ran different cells), an environment failed, or an unexpected error; 130 interrupted by SIGINT,
    143 by SIGTERM (3, usage, is raised before anything runs)."""
    verdicts = {c.verdict for c in result.cells.values()}
    if result.status == "interrupted":
        return 128 + result.stop_signal
    if Verdict.REGRESSION in verdicts:
        return 1
    if result.status == "failed" or Verdict.FAILED in verdicts or Verdict.NOT_JUDGED in verdicts:
        return 4
    if Verdict.INCONCLUSIVE in verdicts:
        return 2
    return 0
