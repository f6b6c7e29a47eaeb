"""``batchperf ab``'s warm-up and its choice of rounds per process (docs/ab.md, "Warm-up and rounds").

A fresh environment's first process pays once for what later ones find ready (vLLM compiling, caches filled:
its first pairs took 175 s against 70 s later, studies/vllm-upgrade/README.md), so a warm-up pair runs before
pair 1 and is discarded: never judged, never counted in the pairs.

When ``--rounds`` is not given, the rounds per process are chosen from a pair's own costs (:func:`choose_rounds`):
as many measured rounds as the process's start-up is worth in seconds, bounded to [:data:`MIN_ROUNDS`,
:data:`MAX_ROUNDS`].
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from batchperf.ab.env import SideRun
from batchperf.results.io import ResultsFile

MIN_ROUNDS = 3  # a median of fewer rounds follows a single jumping round (rounds jump 30-50% on a loaded VM)
MAX_ROUNDS = 40  # vLLM's engine cell: 40 rounds gave a pair sd of 0.016 against 0.108 with 5 (vllm-upgrade study)
WARMUP_ROUNDS = MIN_ROUNDS  # the warm-up's rounds (fewer when fewer are given): enough for a round's median cost


@dataclass(frozen=True, slots=True)
class RoundsChoice:
    """The rounds per process a run measures, and why."""

    chosen: int
    given: int | None  # --rounds (or --batchperf-rounds in the pytest arguments); None: chosen by ab
    why: str
    round_s: float | None = None  # one round of every cell in a process, seconds (measured)
    startup_s: float | None = None  # a process's seconds outside its rounds (measured)

    def __post_init__(self) -> None:
        if self.chosen < 1:
            raise ValueError(f"chosen: {self.chosen} rounds; must be >= 1")

    def to_dict(self) -> dict[str, Any]:
        return {"chosen": self.chosen, "given": self.given, "why": self.why,
                "round_s": None if self.round_s is None else round(self.round_s, 3),
                "startup_s": None if self.startup_s is None else round(self.startup_s, 1)}


@dataclass(frozen=True, slots=True)
class Warmup:
    """The warm-up pair before pair 1: what ran and what it cost; its numbers are discarded."""

    ran: bool
    why: str  # what ran, or why nothing did (--no-warmup)
    rounds: int | None = None
    seconds: Mapping[str, float] | None = None  # environment label -> its process's seconds

    def to_dict(self) -> dict[str, Any]:
        return {"ran": self.ran, "why": self.why, "discarded": True, "rounds": self.rounds,
                "seconds": {k: round(v, 1) for k, v in (self.seconds or {}).items()}}

    def describe(self) -> str:
        if not self.ran:
            return f"warm-up: none ({self.why})"
        took = ", ".join(f"{label} {s:.0f} s" for label, s in (self.seconds or {}).items())
        return f"warm-up: {self.why} ({took}), discarded: never judged, not counted in the pairs"


def round_seconds(results: ResultsFile | None) -> tuple[float, float] | None:
    """(one round of every cell, every round this process ran, warm-up rounds included), in seconds, from its
    results file (each round's ``duration``); None when it has none."""
    if results is None:
        return None
    one, total = 0.0, 0.0
    for record in results.records:
        durations = [r["duration"] for r in record.rounds if isinstance(r.get("duration"), (int, float))]
        if not durations:
            return None
        median = statistics.median(durations)
        one += median
        total += median * (len(durations) + int(record.cell.get("warmup_rounds") or 0))
    return (one, total) if one > 0 else None


def costs(runs: Mapping[str, SideRun], files: Mapping[str, ResultsFile], design: str) -> tuple[float, float] | None:
    """(one round's seconds, a process's start-up seconds) from a pair's processes and their results files, means
    over the two sides; None when the files say nothing of their rounds. In the resident design a worker also waits
    through the other side's rounds, so those are not start-up."""
    per_side = {label: round_seconds(files.get(label)) for label in runs}
    if not per_side or any(c is None for c in per_side.values()):
        return None
    rounds_s = {label: c[1] for label, c in per_side.items() if c is not None}
    startups = []
    for label, run in runs.items():
        busy = sum(rounds_s.values()) if design == "resident" else rounds_s[label]
        startups.append(max(run.seconds - busy, 0.0))
    return statistics.mean(c[0] for c in per_side.values() if c is not None), statistics.mean(startups)


def choose_rounds(runs: Mapping[str, SideRun], files: Mapping[str, ResultsFile], design: str,
                  source: str) -> RoundsChoice | None:
    """Rounds per process from a pair's measured costs: its processes (``runs``) and their results ``files`` as
    :func:`batchperf.ab.pairs.read_pair` read them (``source`` names the pair); None when they say nothing of them.

    A process costs its start-up S plus R rounds of r seconds each; the rounds' wander averages as 1/R, a pair's
    time grows as S + R r. At R = S / r the rounds take as long as the start-up: half the variance that endless
    rounds would reach per minute, and a pair at most twice as long as its start-up (docs/ab.md, "Warm-up and
    rounds")."""
    measured = costs(runs, files, design)
    if measured is None:
        return None
    round_s, startup_s = measured
    wanted = startup_s / round_s
    chosen = min(max(round(wanted), MIN_ROUNDS), MAX_ROUNDS)
    bound = (f", raised to the floor of {MIN_ROUNDS}" if wanted < MIN_ROUNDS
             else f", capped at {MAX_ROUNDS}" if wanted > MAX_ROUNDS else "")
    why = (f"the {source}: a process's start-up {startup_s:.1f} s / a round {round_s:.2f} s = {wanted:.1f} rounds "
           f"(measured rounds about as long as the start-up){bound}")
    return RoundsChoice(chosen, None, why, round_s, startup_s)
