"""Capacity: the highest offered load at which SLO attainment stays >= a target (DistServe, Sarathi-Serve).

The search is pure: it calls a *probe* (one short run of the cell at a load factor, returning its attainment) and
moves a bracket ``[low, high]``: ``low`` met the target, ``high`` missed it.

1. Find a bracket: probe the start load; while it meets the target double it, while it misses halve it (at most
   ``max_load`` / down to ``min_load``).
2. Bisect: probe the midpoint and move the end it replaces, until ``high - low <= resolution × low``: the capacity
   (``low``) is then known to within the resolution (0.05: the true edge lies in ``[low, low × 1.05]``).
3. Noise: a probe whose attainment lies within ``margin`` of the target is repeated (up to ``repeats`` runs at that
   load) and the bracket moves on the median of its runs, so one unlucky run near the edge does not move it.
4. Budget: no probe starts once the elapsed time plus the longest probe so far would exceed ``budget_s``; the result
   then says it did not converge, with the bracket it had.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class ProbeResult:
    attainment: float  # ratio in [0, 1]: requests meeting their SLOs / requests offered
    request_rate: float = 0.0  # requests offered per second in the probe (offered / its duration)

    def __post_init__(self) -> None:
        if not 0 <= self.attainment <= 1:
            raise ValueError(f"a probe's attainment must be a ratio in [0, 1], got {self.attainment}")


Probe = Callable[[float], ProbeResult]  # load factor -> one short run's result


def _positive(name: str, value: float) -> None:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")


@dataclass(frozen=True, slots=True)
class SearchSettings:
    target: float = 0.90  # attainment to hold (DistServe's and Sarathi-Serve's 90%)
    resolution: float = 0.05  # the bracket's width / its low end when the search stops
    start: float = 1.0  # the first load factor probed
    min_load: float = 1 / 64  # below this the cell has no capacity worth the name: 0
    max_load: float = 64.0  # above this the search stops growing: the capacity is at least this
    margin: float = 0.05  # a probe within this of the target (in ratio) is repeated
    repeats: int = 3  # runs at most per load near the edge (odd: a median of runs)
    budget_s: float = 600.0  # wall time the search may take

    def __post_init__(self) -> None:
        if not 0 < self.target <= 1:
            raise ValueError(f"target attainment must be in (0, 1], got {self.target}")
        for name in ("resolution", "start", "min_load", "max_load", "budget_s"):
            _positive(name, getattr(self, name))
        if not self.min_load <= self.start <= self.max_load:
            raise ValueError(f"start load {self.start} must lie in [min_load {self.min_load}, max_load "
                             f"{self.max_load}]")
        if not 0 <= self.margin < 1:
            raise ValueError(f"margin must be in [0, 1), got {self.margin}")
        if self.repeats < 1:
            raise ValueError(f"repeats must be >= 1, got {self.repeats}")


@dataclass(slots=True)
class Capacity:
    """The search's answer: ``max_load`` (the bracket's low end: it met the target) and ``bracket_high``."""

    settings: SearchSettings
    max_load: float = 0.0
    bracket_high: float = math.inf
    attainment_at_max_load: float = 0.0
    max_request_rate: float = 0.0
    converged: bool = False
    why: str = ""  # why it did not converge
    probes: list[tuple[float, float]] = field(default_factory=list)  # (load, attainment) of every run, in order
    search_s: float = 0.0

    @property
    def width(self) -> float:
        """The bracket's width relative to its low end (inf when it has none)."""
        return (self.bracket_high - self.max_load) / self.max_load if self.max_load > 0 else math.inf

    def section(self) -> dict[str, float | bool | str]:
        """The ``capacity`` section of the results record (its catalogue entries: measure/catalogue.py)."""
        out: dict[str, float | bool | str] = {
            "max_load": self.max_load,
            "bracket_high": self.bracket_high if math.isfinite(self.bracket_high) else self.settings.max_load,
            "target_attainment": self.settings.target,
            "resolution": self.settings.resolution,
            "attainment_at_max_load": self.attainment_at_max_load,
            "max_request_rate": self.max_request_rate,
            "probes": len(self.probes),
            "search_s": self.search_s,
            "converged": self.converged,
        }
        if self.why:
            out["why"] = self.why
        return out

    def describe(self) -> str:
        s = self.settings
        head = (f"capacity {self.max_load:.4g} x load (bracket [{self.max_load:.4g}, {self.bracket_high:.4g}], "
                f"attainment >= {s.target:.0%}, resolution {s.resolution:.0%}): {self.max_request_rate:.4g} req/s "
                f"offered, attainment {self.attainment_at_max_load:.1%}; {len(self.probes)} probes in "
                f"{self.search_s:.0f} s")
        return head + ("" if self.converged else f"; NOT converged: {self.why}")


class _OutOfTime(Exception):
    pass


def search(probe: Probe, settings: SearchSettings = SearchSettings(),
           clock: Callable[[], float] = time.monotonic) -> Capacity:
    """Bisect over the load factor for the highest load whose attainment is >= ``settings.target``."""
    s = settings
    result = Capacity(s)
    began = clock()
    longest = 0.0
    rates: dict[float, float] = {}

    def run(load: float) -> float:
        nonlocal longest
        if clock() - began + longest > s.budget_s:
            raise _OutOfTime(f"the budget of {s.budget_s:.0f} s ran out")
        t0 = clock()
        got = probe(load)
        longest = max(longest, clock() - t0)
        result.probes.append((load, got.attainment))
        rates.setdefault(load, got.request_rate)
        return got.attainment

    def meets(load: float) -> tuple[bool, float]:
        """Whether ``load`` meets the target, repeating a run near the edge; and the attainment decided on."""
        runs = [run(load)]
        while abs(statistics.median(runs) - s.target) <= s.margin and len(runs) < s.repeats:
            runs.append(run(load))
        value = statistics.median(runs)
        return value >= s.target, value

    low, high, at_low = 0.0, math.inf, 0.0
    try:
        load = s.start
        ok, value = meets(load)
        if ok:
            low, at_low = load, value
            while math.isinf(high):
                if load >= s.max_load:
                    raise _OutOfTime(f"attainment met the target up to max_load {s.max_load:g}: the capacity is "
                                     f"at least that")
                load = min(load * 2, s.max_load)
                ok, value = meets(load)
                if ok:
                    low, at_low = load, value
                else:
                    high = load
        else:
            high = load
            while low == 0.0:
                if load <= s.min_load:
                    raise _OutOfTime(f"attainment missed the target down to min_load {s.min_load:g}: no capacity")
                load = max(load / 2, s.min_load)
                ok, value = meets(load)
                if ok:
                    low, at_low = load, value
                else:
                    high = load
        while high - low > s.resolution * low:
            mid = (low + high) / 2
            ok, value = meets(mid)
            if ok:
                low, at_low = mid, value
            else:
                high = mid
        result.converged = True
    except _OutOfTime as stop:
        result.why = str(stop)
    result.max_load, result.bracket_high, result.attainment_at_max_load = low, high, at_low
    result.max_request_rate = rates.get(low, 0.0)
    result.search_s = clock() - began
    return result
