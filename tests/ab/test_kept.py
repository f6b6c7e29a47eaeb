"""Servers kept across pairs (``batchperf.ab.kept``): when fresh ones are started, and which side's starts first."""

from __future__ import annotations

import random

import pytest

from batchperf.ab import kept
from batchperf.ab.kept import ServerStart, restart_due
from batchperf.ab.pairs import order_of


def starts(every: int, first: str, pairs: int = 12) -> list[tuple[int, str]]:
    """The (pair, side first) of every start over ``pairs`` pairs, the warm-up's first side ``first``."""
    out = [ServerStart(1, first, in_warmup=True)]
    for index in range(1, pairs + 1):
        if restart_due(out[-1], index, order_of(index), every):
            out.append(ServerStart(index, order_of(index)[0]))
    return [(s.from_pair, s.first) for s in out]


def test_fresh_servers_every_three_pairs_alternate_the_side_that_starts_first() -> None:
    assert starts(3, "A") == [(1, "A"), (4, "B"), (7, "A"), (10, "B")]
    # the warm-up put B first: pair 4 would put B first again, so the restart waits a pair
    assert starts(3, "B") == [(1, "B"), (5, "A"), (8, "B"), (11, "A")]


def test_an_even_interval_still_alternates_the_side_that_starts_first() -> None:
    """Pairs alternate A B, B A: every 2 or 4 pairs would put the same side first at every restart."""
    for every in (2, 4):
        sides = [side for _, side in starts(every, "A", pairs=30)]
        assert len(sides) >= 5 and all(a != b for a, b in zip(sides, sides[1:]))
    assert starts(2, "A", pairs=8) == [(1, "A"), (4, "B"), (7, "A")]


def test_once_a_pair_and_once_a_run() -> None:
    assert [p for p, _ in starts(1, "A", pairs=5)] == [1, 2, 3, 4, 5]
    assert starts(30, "A", pairs=30) == [(1, "A")]  # --restart-servers-every at least --max-pairs: kept a whole run


def test_without_a_warm_up_the_first_pair_starts_them() -> None:
    assert restart_due(None, 1, order_of(1), 3)
    with pytest.raises(ValueError, match="every: 0"):
        restart_due(None, 1, order_of(1), 0)


def test_the_warm_up_order_is_drawn(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kept, "random", random.Random(0))
    drawn = {kept.warmup_order() for _ in range(40)}
    assert drawn == {("A", "B"), ("B", "A")}


def test_a_server_start_is_validated_and_recorded() -> None:
    with pytest.raises(ValueError, match="from_pair: 0"):
        ServerStart(0, "A")
    with pytest.raises(ValueError, match="first: 'C'"):
        ServerStart(1, "C")
    assert ServerStart(4, "B").to_dict() == {"from_pair": 4, "first": "B", "in_warmup": False}
    assert ServerStart(1, "A", in_warmup=True).describe() == "pair 1 (the warm-up's), A first"
