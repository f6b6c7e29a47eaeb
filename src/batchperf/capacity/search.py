"""Capacity: the highest offered load at which SLO attainment stays >= a target (DistServe, Sarathi-Serve).

The search is pure: it calls a *probe* (one short run of the cell at a load factor, returning how many of the
requests it offered met their SLOs) and estimates the capacity from every probe it ran (:mod:`.fit`).

1. Bracket: probe the start load; while it meets the target double it, while it misses halve it (at most
   ``max_load`` / down to ``min_load``), until one load met the target and one missed it.
2. Fit and place: fit attainment against log-load over every probe's requests (:func:`.fit.fit`: a logistic
   curve, with each probe's reference rate as its process's speed, its crossing of the target at the search's mean
   speed, and that crossing's interval at ``confidence``) and run the next probe at the
   current estimate of the crossing or a step of one sd either side of it (:func:`next_load`; as psychophysics'
   staircases place each trial at or about their threshold estimate).
3. Stop when the interval is at most ``resolution`` of the capacity wide (converged), or when no probe can start
   within the budget (``budget_s``: the elapsed time plus the longest probe so far). The answer says which
   (``stopped``).

The spread a search states for the gate (:attr:`Capacity.spread`) is the fit's own standard deviation and a
between-search floor measured from repeated searches, in quadrature; the relative capacity divides the rate at the
capacity by the saturated **reference** rate pooled over every probe of the search (docs/traffic.md, "Between
runs").
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from batchperf.capacity.fit import Fit, fit, outcomes_of

# The between-search floors: what six searches in a row with this search (studies/capacity-repeat, "Issue 57's
# search": quiet, AMD EPYC family 25, two stretches of the machine 70 minutes apart) varied beyond the spread their
# own fits state, sqrt(max(0, sd between searches² - the fits' mean sd²)) (studies/capacity-repeat/issue57.py).
# max_load varied 5.8% between the six (the machine's speed moved: the reference rate fell 6% between the
# stretches), 4.3% more than its fits' 3.8%; the relative capacity, whose reference cancels the machine's speed,
# varied 2.3%, below its own terms' 4.1% (fit and pooled reference), so it needs no floor.
ABSOLUTE_FLOOR = 0.043  # of capacity.max_load / max_request_rate
RELATIVE_FLOOR = 0.0  # of capacity.relative_capacity

REFERENCE_LOAD = 64.0  # the reference round's load factor: every request of the workload offered at once (saturated)
# Probes placed at the fitted crossing before the search may stop: a few probes either side of a cliff fit it
# perfectly (dispersion 1, a tiny interval) however much the runs vary, and a curve the logistic lacks (the
# simulated linear cell, a million requests a run) stopped 3.5% off after 3 placed probes; after 6, 0.9% off
MIN_PLACED = 6

# How a search ended (``capacity.stopped``): only ``resolution`` is converged; ``probes``: a record written from a
# search's probes folder (``batchperf capacity --from-probes``) whose probes ended before any other stop
STOPPED_BY = {"resolution": "the resolution", "budget": "the budget", "max_load": "the max load",
              "min_load": "the min load", "probes": "the end of its kept probes"}
STOPS = tuple(STOPPED_BY)


@dataclass(frozen=True, slots=True)
class ProbeResult:
    met: int  # requests that met their SLOs
    offered: int  # requests offered (a failed or never-returned one is offered, not met)
    request_rate: float = 0.0  # requests offered per second over the probe's arrival span (the drain excluded)
    reference_rate: float | None = None  # requests/s the saturated reference round served in the same process

    def __post_init__(self) -> None:
        if not (isinstance(self.offered, int) and self.offered >= 1):
            raise ValueError(f"a probe must offer a whole number >= 1 of requests, got {self.offered!r}")
        if not (isinstance(self.met, int) and 0 <= self.met <= self.offered):
            raise ValueError(f"a probe's met requests must be a whole number in [0, offered {self.offered}], "
                             f"got {self.met!r}")
        if self.reference_rate is not None and not (math.isfinite(self.reference_rate) and self.reference_rate > 0):
            raise ValueError(f"a probe's reference_rate must be a finite number > 0 or None, "
                             f"got {self.reference_rate!r}")

    @property
    def attainment(self) -> float:
        return self.met / self.offered


Probe = Callable[[float], ProbeResult]  # load factor -> one short run's result


def _positive(name: str, value: float) -> None:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")


@dataclass(frozen=True, slots=True)
class SearchSettings:
    target: float = 0.90  # attainment to hold (DistServe's and Sarathi-Serve's 90%)
    resolution: float = 0.05  # the capacity's interval, as a share of it, at most this wide when the search stops
    start: float = 1.0  # the first load factor probed
    min_load: float = 1 / 64  # below this the cell has no capacity worth the name: 0
    max_load: float = 64.0  # above this the search stops growing: the capacity is at least this
    confidence: float = 0.90  # of the capacity's interval
    budget_s: float = 600.0  # wall time the search may take

    def __post_init__(self) -> None:
        if not 0 < self.target < 1:
            raise ValueError(f"target attainment must be in (0, 1), got {self.target}")
        for name in ("resolution", "start", "min_load", "max_load", "budget_s"):
            _positive(name, getattr(self, name))
        if not self.min_load <= self.start <= self.max_load:
            raise ValueError(f"start load {self.start} must lie in [min_load {self.min_load}, max_load "
                             f"{self.max_load}]")
        if not 0 < self.confidence < 1:
            raise ValueError(f"confidence must be in (0, 1), got {self.confidence}")


def search_spread(fit_sd: float, reference: float, floor: float) -> float:
    """The capacity's standard deviation from search to search, as a share of it: the independent terms in
    quadrature: the fit's own (``Fit.sd``), the ``reference`` term (the pooled reference's standard error, for the
    relative capacity; 0 for the absolute one) and the between-search ``floor`` measured from repeated searches."""
    for name, value in (("fit_sd", fit_sd), ("reference", reference), ("floor", floor)):
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
            raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return math.sqrt(fit_sd ** 2 + reference ** 2 + floor ** 2)


@dataclass(frozen=True, slots=True)
class Capacity:
    """The search's answer: every run, the last fit (None before a bracket), how the search ended."""

    settings: SearchSettings
    runs: tuple[tuple[float, ProbeResult], ...]  # (load, result) of every probe, in order
    fit: Fit | None
    stopped: str  # one of STOPS
    search_s: float = 0.0

    def __post_init__(self) -> None:
        if self.stopped not in STOPS:
            raise ValueError(f"stopped must be one of {', '.join(STOPS)}, got {self.stopped!r}")

    @property
    def converged(self) -> bool:
        return self.stopped == "resolution"

    @property
    def why(self) -> str:
        """Why it did not converge ("" when it did)."""
        s = self.settings
        return {"resolution": "",
                "budget": f"the budget of {s.budget_s:.0f} s ran out before the interval reached the resolution",
                "max_load": f"attainment met the target up to max_load {s.max_load:g}: the capacity is at least that",
                "min_load": f"attainment missed the target down to min_load {s.min_load:g}: no capacity",
                "probes": "written from a probes folder whose probes ended before the interval reached the "
                          "resolution (an interrupted search's, or one whose budget ran out)"}[self.stopped]

    @property
    def max_load(self) -> float:
        """The capacity: the fitted crossing; before a bracket, the highest load that met the target (0 if none);
        ``max_load`` when the target held up to it, 0 when it failed down to ``min_load``."""
        if self.stopped == "max_load":
            return self.settings.max_load
        if self.fit is not None:
            return self.fit.capacity
        return max((load for load, got in self.runs if got.attainment >= self.settings.target), default=0.0)

    @property
    def interval(self) -> tuple[float, float] | None:
        return None if self.fit is None else (self.fit.low, self.fit.high)

    @property
    def rate_per_load(self) -> float:
        """Requests offered per second per unit of load at the capacity: the arrival-span rate ÷ load of the probes
        at the load nearest ``max_load`` (their median). A workload's offered rate need not be proportional to its
        load: the sustained fixture's batch tenant arrives in on/off periods that do not scale, so its rate per
        unit of load is a sawtooth in the load (5.5 at load 5.34, 3.7 at 5.31: studies/capacity-repeat), and a
        median over every probe mixed the teeth. No capacity (0): the median over every probe."""
        rated = [(load, got.request_rate / load) for load, got in self.runs if got.request_rate > 0]
        if not rated:
            return 0.0
        if self.max_load > 0:
            nearest = min(abs(math.log(load / self.max_load)) for load, _ in rated)
            rated = [(load, r) for load, r in rated if abs(math.log(load / self.max_load)) == nearest]
        return statistics.median(r for _, r in rated)

    @property
    def max_request_rate(self) -> float:
        """Requests offered per second at the capacity: ``max_load`` × the rate per unit of load there."""
        return self.max_load * self.rate_per_load

    @property
    def references(self) -> list[float]:
        """Every probe's reference rate (requests/s served saturated, in the probe's process), in run order."""
        return [got.reference_rate for _, got in self.runs if got.reference_rate is not None]

    @property
    def reference_rate(self) -> float | None:
        """The reference pooled over the search: the mean of every probe's (its own round's noise, ±9–13% on the
        CPU tier, falls by the square root of the probes); None when the probes ran none."""
        refs = self.references
        return statistics.fmean(refs) if refs else None

    @property
    def reference_drift(self) -> float:
        """The references' coefficient of variation over the search (population sd / mean; 0 with fewer than two):
        the reference round's own noise and the machine's drift together."""
        refs = self.references
        return statistics.pstdev(refs) / statistics.fmean(refs) if len(refs) >= 2 else 0.0

    @property
    def relative_capacity(self) -> float | None:
        """The offered rate at the capacity as a share of the pooled reference rate; None without references."""
        reference = self.reference_rate
        return None if reference is None or self.max_request_rate <= 0 else self.max_request_rate / reference

    @property
    def spread(self) -> float | None:
        """The absolute capacity's expected standard deviation from search to search, as a share of it
        (:func:`search_spread`: the fit's, ``ABSOLUTE_FLOOR``); None without a fit."""
        return None if self.fit is None else search_spread(self.fit.sd, 0.0, ABSOLUTE_FLOOR)

    @property
    def relative_spread(self) -> float | None:
        """The relative capacity's: as :attr:`spread` with the pooled reference's standard error (sample sd /
        sqrt(probes) / mean) and ``RELATIVE_FLOOR``; None without a fit or a reference."""
        refs = self.references
        if self.fit is None or self.relative_capacity is None:
            return None
        error = statistics.stdev(refs) / math.sqrt(len(refs)) / statistics.fmean(refs) if len(refs) >= 2 else 0.0
        return search_spread(self.fit.sd, error, RELATIVE_FLOOR)

    def section(self) -> dict[str, float | bool | str]:
        """The ``capacity`` section of the results record (its catalogue entries: measure/catalogue.py); the fit's
        figures only when there was a fit, the reference's only when the probes ran one."""
        s = self.settings
        out: dict[str, float | bool | str] = {
            "max_load": self.max_load,
            "target_attainment": s.target,
            "resolution": s.resolution,
            "confidence": s.confidence,
            "max_request_rate": self.max_request_rate,
            "probes": len(self.runs),
            "requests": sum(got.offered for _, got in self.runs),
            "search_s": self.search_s,
            "converged": self.converged,
            "stopped": self.stopped,
        }
        if (f := self.fit) is not None:
            out |= {"interval_low": f.low, "interval_high": f.high, "dispersion": f.dispersion, "slope": f.slope}
            if f.speed_effect is not None:
                out["speed_effect"] = f.speed_effect
        if (spread := self.spread) is not None:
            out["spread"] = spread
        if (reference := self.reference_rate) is not None and (relative := self.relative_capacity) is not None:
            out |= {"reference_rate": reference, "reference_drift": self.reference_drift,
                    "relative_capacity": relative}
            if (relative_spread := self.relative_spread) is not None:
                out["relative_spread"] = relative_spread
        if self.why:
            out["why"] = self.why
        return out

    def describe(self) -> str:
        s = self.settings
        requests = sum(got.offered for _, got in self.runs)
        head = f"capacity {self.max_load:.4g} x load"
        if (f := self.fit) is not None:
            head += (f" ({f.confidence:.0%} interval [{f.low:.4g}, {f.high:.4g}]: {f.width:.1%} wide, resolution "
                     f"{s.resolution:.0%}; attainment {s.target:.0%} crossed by a fit over {requests} requests, "
                     f"slope {f.slope:.2g}/100% load, dispersion {f.dispersion:.2g}"
                     + ("" if f.speed_effect is None else f", each probe's speed taken out: {f.speed_effect:.2g} "
                        "logits per unit log reference rate") + ")")
        head += (f": {self.max_request_rate:.4g} req/s offered; {len(self.runs)} probes in {self.search_s:.0f} s, "
                 f"stopped by {STOPPED_BY[self.stopped]}")
        if (relative := self.relative_capacity) is not None:
            head += (f"; relative capacity {relative:.3g} of the {self.reference_rate:.3g} req/s served saturated "
                     f"(pooled over {len(self.references)} probes, each ±{self.reference_drift:.1%})")
        if (spread := self.spread) is not None:
            head += f"; expected spread ±{spread:.1%} (1 sd)"
            if (relative_spread := self.relative_spread) is not None:
                head += f", ±{relative_spread:.1%} relative"
        return head + ("" if self.converged else f"; NOT converged: {self.why}")


def fit_runs(runs: Sequence[tuple[float, ProbeResult]], settings: SearchSettings) -> Fit:
    """The curve over every probe's requests, each probe's reference as its process's speed (:func:`.fit.fit`)."""
    outcomes = outcomes_of([(load, got.met, got.offered) for load, got in runs],
                           [got.reference_rate for _, got in runs])
    return fit(outcomes, settings.target, settings.confidence, (settings.min_load, settings.max_load))


def _range_stop(met: bool, load: float, s: SearchSettings) -> str | None:
    """While bracketing: the stop when a probe at ``load`` that ``met`` (or not) the target is at the load range's
    end, so the bracket cannot be completed; None otherwise."""
    if met and load >= s.max_load:
        return "max_load"
    if not met and load <= s.min_load:
        return "min_load"
    return None


def _resolved(current: Fit, placed: int, s: SearchSettings) -> bool:
    """Whether a search with ``placed`` probes after its bracket may stop: enough of them, the interval narrow."""
    return placed >= MIN_PLACED and current.width <= s.resolution


def standing(runs: Sequence[tuple[float, ProbeResult]], settings: SearchSettings, search_s: float = 0.0) -> Capacity:
    """Where a search that ran ``runs`` (in order) stands, as :func:`search` would say at its end: the fit once the
    runs bracket the crossing; ``resolution`` when the probes placed after the bracket reach ``MIN_PLACED`` and the
    interval the resolution, ``max_load`` / ``min_load`` when the bracketing ran into the load range, and otherwise
    ``probes`` (the runs ended before a stop). ``batchperf capacity --from-probes`` reads a search's kept probes."""
    s = settings
    if not runs:
        raise ValueError("a search's standing needs at least one probe")
    met = [got.attainment >= s.target for _, got in runs]
    flip = next((i for i, m in enumerate(met) if m != met[0]), None)
    if flip is None:
        stopped = _range_stop(met[0], runs[-1][0], s) or "probes"
        return Capacity(s, tuple(runs), None, stopped, search_s)
    current = fit_runs(runs, s)
    stopped = "resolution" if _resolved(current, len(runs) - flip - 1, s) else "probes"
    return Capacity(s, tuple(runs), current, stopped, search_s)


class _Stop(Exception):
    def __init__(self, stopped: str) -> None:
        super().__init__(stopped)
        self.stopped = stopped


def next_load(current: Fit, settings: SearchSettings, placed: int) -> float:
    """Where the ``placed``-th probe after the bracket goes: in turn at the current estimate of the crossing, one sd
    of it above (at most the resolution), at the crossing, one sd below. At the crossing a probe pins the attainment
    at the target whatever the curve's shape; a step either side measures the steepness there, which probes at one
    load cannot, and keeps an estimate that started off on one side from creeping back one small step a probe
    (simulated logistic cell, 5 points of run-to-run noise, 30 probes at most: the 90% interval held the capacity
    in 87% of 200 searches with every probe at the crossing, sd 5.1%; 94% of 100 with the steps, sd 3.3%). The
    interval's ends instead of one sd wander far while the interval is wide (the estimate came out 9-11% low). To
    three significant figures (close probes share a load and a file name), within the search's load range."""
    step = min(current.sd, settings.resolution)
    load = current.capacity * math.exp(step * (0, 1, 0, -1)[placed % 4])
    return min(settings.max_load, max(settings.min_load, float(f"{load:.3g}")))


def search(probe: Probe, settings: SearchSettings = SearchSettings(),
           clock: Callable[[], float] = time.monotonic) -> Capacity:
    """Bracket the crossing, then fit over every probe and probe at the fitted crossing until its interval is
    within ``settings.resolution`` or the budget ends."""
    s = settings
    runs: list[tuple[float, ProbeResult]] = []
    began = clock()
    longest = 0.0

    def run(load: float) -> bool:
        """One probe at ``load``: whether it met the target."""
        nonlocal longest
        if clock() - began + longest > s.budget_s:
            raise _Stop("budget")
        t0 = clock()
        got = probe(load)
        longest = max(longest, clock() - t0)
        runs.append((load, got))
        return got.attainment >= s.target

    def fitted() -> Fit:
        return fit_runs(runs, s)

    current: Fit | None = None
    stopped = "resolution"
    try:
        load = s.start
        up = run(load)
        while True:  # double while it meets, halve while it misses, until the other side is seen
            if end := _range_stop(up, load, s):
                raise _Stop(end)
            load = min(load * 2, s.max_load) if up else max(load / 2, s.min_load)
            if run(load) != up:
                break
        current = fitted()
        placed = 0
        while not _resolved(current, placed, s):
            run(next_load(current, s, placed))
            placed += 1
            current = fitted()
    except _Stop as stop:  # raised before a probe starts: the last fit (if any) holds every run
        stopped = stop.stopped
    return Capacity(s, tuple(runs), current, stopped, clock() - began)
