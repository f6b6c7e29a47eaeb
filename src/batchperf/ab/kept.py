"""Servers kept across pairs (``ab --keep-servers``): where each side's are, when its processes start fresh ones,
and the order the pairs run in (docs/ab.md, "Servers kept across pairs").

A kept server has a level of its own (a few tenths of a percent, sd of ln), and a server kept for a whole run puts
that one level into every pair alike, where the interval cannot see it. So the servers are retired every
``--restart-servers-every`` N pairs (both sides at the same pair boundary, between pairs, while nothing measures):
the pairs fall into sets of N, each served by one pair of servers, which the set's first pair's processes start in
their first, discarded, round.

Which side's server starts second is measured to lean (the second-started read faster, +1.7% on average, in 19 of
27 kept pairs and 39 of 46 fresh ones: studies/ab-detector, "Kept servers restarted every 3 pairs"). So the order
is balanced by design: the warm-up draws which side starts first, the sets alternate it (A first, B first, …), and
each set's pairs alternate their order from the side that started first (:func:`kept_order`): over any two sets
each side's server is the second to start in as many pairs as the other's, and over any two pairs each side runs
first once.
"""

from __future__ import annotations

import os
import random
import statistics
from collections.abc import Callable, Mapping, Sequence
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
    """The first set's order (the warm-up's, or ``--no-warmup``'s pair 1): drawn at random, so that neither side's
    server is always the second to start (the first kept-server rows leaned B-faster 5 of 6 with B's always second)."""
    first = random.choice(SIDES)
    return (first, other(first))


def other(side: str) -> str:
    return "B" if side == "A" else "A"


def kept_order(index: int, first: str, every: int) -> tuple[str, str]:
    """The order pair ``index`` runs its sides in, with kept servers restarted every ``every`` pairs and the first
    set's servers started ``first`` first: the set's side that started first runs first in the set's first pair
    (whose processes start its servers, in this order), then the pairs of the set alternate; the sets alternate
    the side that starts first. With ``every`` 2 and A first: A B, B A | B A, A B | A B, B A, …"""
    if every < 1:
        raise ValueError(f"every: {every}; servers are restarted every 1 or more pairs")
    if first not in SIDES:
        raise ValueError(f"first: {first!r}; must be one of {', '.join(SIDES)}")
    kept_set, within = divmod(index - 1, every)
    lead = first if kept_set % 2 == 0 else other(first)
    runs_first = lead if within % 2 == 0 else other(lead)
    return (runs_first, other(runs_first))


def restart_due(index: int, every: int) -> bool:
    """Start fresh servers for pair ``index``? Yes at the first pair of each set of ``every`` pairs after the
    first set (whose servers the warm-up, or ``--no-warmup``'s pair 1, starts)."""
    if every < 1:
        raise ValueError(f"every: {every}; servers are restarted every 1 or more pairs")
    return index > 1 and (index - 1) % every == 0


def pair_prices(seconds: Mapping[int, float], starts: Sequence[ServerStart], every: int,
                per_pair: float) -> Callable[[int], float]:
    """The seconds pair ``index`` is expected to take (``ab``'s budget rule), from ``seconds`` (each measured pair's
    processes' seconds, the longer side's, by pair): the pairs measured took ``per_pair`` on average (the clock's,
    judging included), split between the pairs that started fresh servers and those that kept them in the ratio of
    their processes' seconds, and a pair ahead pays the restart price where a restart falls due, the kept price
    elsewhere. A restart pair costs about two kept ones (126-150 s against 68-91 s, vLLM's server cell), so the mean
    over pairs that held one restart in four priced the kept pairs after it too high. Until both kinds were
    measured, every pair is priced ``per_pair``."""
    fresh = {start.from_pair for start in starts if not start.in_warmup}
    restart = [s for index, s in seconds.items() if index in fresh]
    kept = [s for index, s in seconds.items() if index not in fresh]
    if not restart or not kept or min(seconds.values()) <= 0:
        return lambda index: per_pair
    scale = per_pair / statistics.fmean(seconds.values())
    restart_s, kept_s = scale * statistics.fmean(restart), scale * statistics.fmean(kept)
    return lambda index: restart_s if restart_due(index, every) else kept_s


def pairs_within(seconds: float, price: Callable[[int], float], first: int, most: int) -> int:
    """How many pairs, from pair ``first`` on, ``seconds`` hold at ``price`` each; ``most`` at most."""
    count, spent = 0, price(first)
    while count < most and spent <= seconds:
        count += 1
        spent += price(first + count)
    return count


def retire(out: Path) -> None:
    """End both sides' kept servers, keeping their records: each side's next process starts a fresh one and counts
    the start."""
    for label in SIDES:
        stop_kept(kept_folder(out, label))
