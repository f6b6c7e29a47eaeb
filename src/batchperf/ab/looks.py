"""The looks a run plans for: as many pairs as ``--max-minutes`` holds, when that is fewer than ``--max-pairs``
(docs/ab.md, "Looks planned for the budget").

The sequential test spends its false-alarm rate over the looks it plans (one after every pair, up to the budget of
pairs): planned for 30 looks, each look's signed-rank level is 0.0107 and a verdict needs 8 pairs at least;
planned for 8, 0.031 and 6. When the minutes, not the pairs, end a run, the looks past the minutes never happen,
and planning for them only made each look stricter: on vLLM's engine cell (a pair ~65-73 s on the 2-core AMD
host) ``--max-minutes 10`` held 7 pairs while the default 30 looks asked for 8, and every verdict stopped at
once. So once the warm-up has measured what a pair costs (its start-up and its rounds, :mod:`batchperf.ab.warmup`),
the run plans its looks for the pairs its remaining minutes hold. The plan depends on costs only, never on the
measured ratios, and is made before any look could decide, so the whole run's false-alarm rate stays ``alpha``.

The warm-up's three rounds can under-price a pair (vLLM's engine cell: 53-60 s predicted, 70-90 s measured, so 9
looks planned and 7 run). So after every pair the run compares the pairs' measured seconds with the plan's, and
when they ran slower it plans again for the fewer pairs the minutes now hold, but only to a test that is at no look
stricter than the one it replaces (:func:`looser`). Then every look already judged was judged at a level no looser
than the new plan's, so the run's rejections stay inside the new plan's, whose chance under the null is at most
``alpha``; and the switch depends on seconds, not on ratios. A run the warm-up gave no plan (every pair asked
fitted) is planned the same way once its measured pairs run slower than the warm-up predicted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from batchperf.ab.stats import SequentialTest


@dataclass(frozen=True, slots=True)
class LookPlan:
    """The pairs the test's looks were planned for, when fewer than ``--max-pairs``, and why."""

    pairs: int  # the looks planned (the run's budget of pairs from here on)
    asked: int  # --max-pairs
    pair_s: float  # a pair's seconds: predicted from the warm-up, or measured over the pairs so far
    why: str
    after: int = 0  # the pairs measured when it was planned (0: from the warm-up)

    def __post_init__(self) -> None:
        if not 1 <= self.pairs < self.asked:
            raise ValueError(f"pairs: {self.pairs} planned of {self.asked} asked; a plan only ever lowers the budget")

    def to_dict(self) -> dict[str, Any]:
        return {"pairs": self.pairs, "asked": self.asked, "pair_s": round(self.pair_s, 1), "why": self.why,
                "after": self.after}


def pair_seconds(round_s: float, startup_s: float, rounds: int, design: str) -> float:
    """A pair's seconds predicted from a process's start-up and one round's seconds (:mod:`batchperf.ab.warmup`):
    resident, the two start at once and take turns round by round; duet, both at once on their own cores;
    sequential, one after the other."""
    if design == "resident":
        return startup_s + 2 * rounds * round_s
    if design == "duet":
        return startup_s + rounds * round_s
    return 2 * (startup_s + rounds * round_s)


def plan_looks(asked: int, minutes: float | None, elapsed_s: float, done: int, pair_s: float,
               fewest: int, measured: bool = False) -> LookPlan | None:
    """The plan for a run that has spent ``elapsed_s`` and measured ``done`` pairs, whose pairs take ``pair_s``
    (``measured``: the pairs so far, else the warm-up's prediction): the pairs ``minutes`` hold, when fewer than
    ``asked``; None when the pairs budget ends the run first, when no minutes are set, or when the minutes hold
    fewer than the ``fewest`` pairs any plan can decide from (the budget rule then stops the run and names the
    minutes a verdict needs)."""
    if minutes is None or pair_s <= 0:
        return None
    fit = done + int(max(minutes * 60 - elapsed_s, 0.0) // pair_s)
    if fit >= asked or fit < fewest:
        return None
    source = f"the {done} pair(s) measured" if measured else "the warm-up's start-up and rounds"
    return LookPlan(fit, asked, pair_s, f"--max-minutes {minutes:g} holds about {fit} pairs of {pair_s:.0f} s "
                                        f"({source}), fewer than --max-pairs {asked}", done if measured else 0)


def looser(new: SequentialTest, old: SequentialTest) -> bool:
    """True when ``new`` is at no look stricter than ``old``: a signed-rank per-look level at least as high, or t
    boundaries no higher at any look ``new`` has."""
    if new.test != old.test:
        return False
    if new.test == "signed-rank":
        return (new.level or 0.0) >= (old.level or 0.0)
    return all(n <= (old.crit[i] if i < len(old.crit) else old.crit[-1]) for i, n in enumerate(new.crit))
