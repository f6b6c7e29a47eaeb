"""Servers kept across pairs (``batchperf.ab.kept``): when fresh ones are started, and which side's starts first."""

from __future__ import annotations

import random

import pytest

from batchperf.ab import kept
from batchperf.ab.kept import ServerStart, kept_order, restart_due
from batchperf.ab.pairs import order_of


def starts(every: int, first: str, pairs: int = 12) -> list[tuple[int, str]]:
    """The (pair, side first) of every start over ``pairs`` pairs, the warm-up's first side ``first``."""
    out = [ServerStart(1, first, in_warmup=True)]
    for index in range(1, pairs + 1):
        if restart_due(index, every):
            out.append(ServerStart(index, kept_order(index, first, every)[0]))
    return [(s.from_pair, s.first) for s in out]


def test_fresh_servers_start_every_n_pairs_and_the_side_that_starts_first_alternates() -> None:
    assert starts(3, "A") == [(1, "A"), (4, "B"), (7, "A"), (10, "B")]
    assert starts(3, "B") == [(1, "B"), (4, "A"), (7, "B"), (10, "A")]
    assert starts(2, "A", pairs=8) == [(1, "A"), (3, "B"), (5, "A"), (7, "B")]  # an even N no longer waits a pair


def test_the_pairs_follow_the_sets_of_their_servers() -> None:
    orders = ["".join(kept_order(i, "A", 2)) for i in range(1, 9)]
    assert orders == ["AB", "BA", "BA", "AB", "AB", "BA", "BA", "AB"]
    assert ["".join(kept_order(i, "B", 3)) for i in range(1, 7)] == ["BA", "AB", "BA", "AB", "BA", "AB"]
    # fresh servers every pair: the plain alternation (pairs.order_of)
    assert [kept_order(i, "A", 1) for i in range(1, 7)] == [order_of(i) for i in range(1, 7)]


@pytest.mark.parametrize("every", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("first", ["A", "B"])
def test_over_two_sets_each_side_s_server_starts_second_as_often(every: int, first: str) -> None:
    """The lean measured (the side whose server started second read faster) cancels within each two sets; a set's
    first pair runs its sides in the order their servers started; each side runs first as often over every
    two pairs of a set, and over two sets."""
    started = dict(starts(every, first, pairs=8 * every))
    for two_sets in range(4):
        pairs = range(2 * every * two_sets + 1, 2 * every * (two_sets + 1) + 1)
        seconds = [kept_order(max(p for p in started if p <= i), first, every)[1] for i in pairs]
        assert seconds.count("A") == seconds.count("B") == every
        runs_first = [kept_order(i, first, every)[0] for i in pairs]
        assert runs_first.count("A") == runs_first.count("B") == every
    for index, side in started.items():
        assert kept_order(index, first, every)[0] == side  # the set's first pair starts its servers in its order


def test_once_a_pair_and_once_a_run() -> None:
    assert [p for p, _ in starts(1, "A", pairs=5)] == [1, 2, 3, 4, 5]
    assert starts(30, "A", pairs=30) == [(1, "A")]  # --restart-servers-every at least --max-pairs: kept a whole run


def test_an_interval_below_one_pair_is_refused() -> None:
    assert not restart_due(1, 3)  # the first set's servers: the warm-up's (or --no-warmup's pair 1's)
    with pytest.raises(ValueError, match="every: 0"):
        restart_due(2, 0)
    with pytest.raises(ValueError, match="every: 0"):
        kept_order(2, "A", 0)
    with pytest.raises(ValueError, match="first: 'C'"):
        kept_order(2, "C", 2)


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
