"""Servers kept across pairs (``ab --keep-servers``): where each side's are, and when its processes start fresh ones
(docs/ab.md, "Servers kept across pairs").

A kept server has a level of its own (a few tenths of a percent, sd of ln), and a server kept for a whole run puts
that one level into every pair alike, where the interval cannot see it. So the servers are retired every
``--restart-servers-every`` pairs (both sides at the same pair boundary, between pairs, while nothing measures): the
next pair's processes start fresh ones in their first, discarded, round, and a verdict's pairs sample several server
levels. The side whose server starts first alternates: the warm-up's order is drawn at random, and a restart waits a
pair when it would put the same side first again.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from batchperf.ab.env import Environment
from batchperf.launch.environ import KEEP_SERVERS_ENV, KEEP_SERVERS_OWNER_ENV
from batchperf.launch.kept_server import stop_kept

SIDES = ("A", "B")


@dataclass(frozen=True, slots=True)
class ServerStart:
    """Fresh kept servers, started by one pair's processes (the warm-up's, or a measured pair's after a restart)."""

    from_pair: int  # the first measured pair that runs on them
    first: str  # the side whose process started its server first
    in_warmup: bool = False  # started by the warm-up pair (it serves from pair 1)

    def __post_init__(self) -> None:
        if self.from_pair < 1:
            raise ValueError(f"from_pair: {self.from_pair}; pairs are numbered from 1")
        if self.first not in SIDES:
            raise ValueError(f"first: {self.first!r}; must be one of {', '.join(SIDES)}")

    def to_dict(self) -> dict[str, Any]:
        return {"from_pair": self.from_pair, "first": self.first, "in_warmup": self.in_warmup}

    def describe(self) -> str:
        return f"pair {self.from_pair}" + (" (the warm-up's)" if self.in_warmup else "") + f", {self.first} first"


def kept_folder(out: Path, label: str) -> Path:
    return out.resolve() / "servers" / label


def with_kept_servers(envs: dict[str, Environment], out: Path) -> dict[str, Environment]:
    """A and B told where their kept servers are and whose they are (:mod:`batchperf.launch.kept_server`: this
    process's, so they end with it)."""
    return {label: replace(env, vars=(*env.vars, (KEEP_SERVERS_ENV, str(kept_folder(out, label))),
                                      (KEEP_SERVERS_OWNER_ENV, str(os.getpid()))))
            for label, env in envs.items()}


def warmup_order() -> tuple[str, str]:
    """The warm-up pair's order when it starts the kept servers: drawn at random, so that neither side's server is
    always the second to start (the first kept-server rows leaned B-faster 5 of 6 with B's always second)."""
    first = random.choice(SIDES)
    return (first, "B" if first == "A" else "A")


def restart_due(last: ServerStart | None, index: int, order: tuple[str, str], every: int) -> bool:
    """Start fresh servers for pair ``index``, whose sides run in ``order``? Yes when none was started yet
    (``--no-warmup``'s pair 1), or when the last ones have served ``every`` pairs and ``order`` puts the other side
    first (else the restart waits a pair: the pairs' orders alternate, so with an even ``every`` the restart pairs'
    orders would all be the same)."""
    if every < 1:
        raise ValueError(f"every: {every}; servers are restarted every 1 or more pairs")
    if last is None:
        return True
    return index - last.from_pair >= every and order[0] != last.first


def retire(out: Path) -> None:
    """End both sides' kept servers, keeping their records: each side's next process starts a fresh one and counts
    the start."""
    for label in SIDES:
        stop_kept(kept_folder(out, label))
