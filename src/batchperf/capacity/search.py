"""Capacity: the highest offered load at which SLO attainment stays >= a target (DistServe, Sarathi-Serve).

The search is pure: it calls a *probe* (one short run of the cell at a load factor, returning how many of the
requests it offered met their SLOs) and moves a bracket ``[low, high]``: ``low`` met the target, ``high`` missed it.

1. Find a bracket: probe the start load; while it meets the target double it, while it misses halve it (at most
   ``max_load`` / down to ``min_load``).
2. Bisect: probe the midpoint and move the end it replaces, until ``high - low <= resolution × low``.
3. Noise: every run at one load is **pooled** (attainment = requests met / requests offered over all its runs),
   and a load is put on one side of the target only when a confidence interval on its pooled attainment
   (Wilson's score interval at ``confidence``) excludes the target. While the interval straddles the target the
   load is run again, up to ``repeats`` runs; a load still straddling then is decided by its pooled attainment
   (the attainment curve crosses the target there within the noise, and either side is as right as the data
   can say). A probe far from the target is decided on one run; each load of the bisection (near the edge) runs
   at least ``bisect_runs`` times, so that runs which disagree (a machine whose speed moves from run to run, or a
   cliff that moves: 100% on one run, 5% on the next) are seen and counted in the dispersion below.
4. Overdispersion: runs of one cell in fresh processes vary more than the binomial (the machine is part of the
   noise). The binomial variance is multiplied by a dispersion factor ``phi >= 1`` estimated from the loads run
   more than once in this search (Pearson's chi-square of their runs ÷ degrees of freedom, the quasi-binomial
   estimate), so an interval is never narrower than the spread the runs themselves showed.
5. Budget: no probe starts once the elapsed time plus the longest probe so far would exceed ``budget_s``; the
   result then says it did not converge, with the bracket it had.

How close two searches land (docs/traffic.md, "How repeatable"): a load decided on ``N`` pooled requests has an
attainment error ``sigma = sqrt(phi p (1 - p) / N)``; where the attainment curve falls with slope ``s`` (per unit
of relative load) the crossing is known to ``sigma / s`` of the load within the run (:func:`binomial_spread`).
That is not all that moves between runs: the machine's speed drifts over minutes, and capacity is an absolute
rate. So each probe also runs a saturated **reference** round in the same process (the same cell at
``REFERENCE_LOAD``: what the machine serves now), the capacity is also given relative to it (the offered rate at
the capacity ÷ the reference's service rate, run by run: the drift cancels), and the spread the search states
(:func:`search_spread`) adds to the binomial the bracket's own width, the reference's drift across the run (for
the absolute figure) and a floor measured from repeated searches (``ABSOLUTE_FLOOR``, ``RELATIVE_FLOOR``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from scipy import stats

# The between-search floors: the search-to-search standard deviation, as a share of the capacity, that six searches
# in a row showed on a quiet 2-core AMD EPYC (studies/capacity-repeat/data/run-1..6.json, summary.json): max_load
# 2.75, 2.75, 2.625, 2.75, 2.75, 3.125 (sd 6.1%); relative_capacity 0.378, 0.347, 0.283, 0.346, 0.358, 0.325 (9.6%).
ABSOLUTE_FLOOR = 0.06  # of capacity.max_load / max_request_rate
RELATIVE_FLOOR = 0.10  # of capacity.relative_capacity

REFERENCE_LOAD = 64.0  # the reference round's load factor: every request of the workload offered at once (saturated)


@dataclass(frozen=True, slots=True)
class ProbeResult:
    met: int  # requests that met their SLOs
    offered: int  # requests offered (a failed or never-returned one is offered, not met)
    request_rate: float = 0.0  # requests offered per second in the probe (offered / its duration)
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
    resolution: float = 0.05  # the bracket's width / its low end when the search stops
    start: float = 1.0  # the first load factor probed
    min_load: float = 1 / 64  # below this the cell has no capacity worth the name: 0
    max_load: float = 64.0  # above this the search stops growing: the capacity is at least this
    confidence: float = 0.90  # a load is decided when this interval on its pooled attainment excludes the target
    repeats: int = 4  # runs at most at one load while its interval straddles the target
    bisect_runs: int = 2  # runs at least at each load of the bisection (near the edge: the noise is measured there)
    budget_s: float = 600.0  # wall time the search may take

    def __post_init__(self) -> None:
        if not 0 < self.target <= 1:
            raise ValueError(f"target attainment must be in (0, 1], got {self.target}")
        for name in ("resolution", "start", "min_load", "max_load", "budget_s"):
            _positive(name, getattr(self, name))
        if not self.min_load <= self.start <= self.max_load:
            raise ValueError(f"start load {self.start} must lie in [min_load {self.min_load}, max_load "
                             f"{self.max_load}]")
        if not 0 <= self.confidence < 1:
            raise ValueError(f"confidence must be in [0, 1) (0: decide every load on one run), got {self.confidence}")
        if not (isinstance(self.repeats, int) and self.repeats >= 1):
            raise ValueError(f"repeats must be a whole number >= 1, got {self.repeats!r}")
        if not (isinstance(self.bisect_runs, int) and 1 <= self.bisect_runs <= self.repeats):
            raise ValueError(f"bisect_runs must be a whole number in [1, repeats {self.repeats}], "
                             f"got {self.bisect_runs!r}")


def wilson(p: float, n: float, confidence: float) -> tuple[float, float]:
    """Wilson's score interval for a proportion ``p`` observed over ``n`` trials (``n`` may be an effective,
    fractional count: the pooled requests divided by the dispersion factor); confidence 0 gives the point itself."""
    if not (0 <= p <= 1 and n > 0):
        raise ValueError(f"Wilson's interval needs a proportion in [0, 1] and trials > 0, got {p!r} over {n!r}")
    offered = n
    if confidence == 0:
        return p, p
    z = float(stats.norm.ppf(0.5 + confidence / 2))
    z2n = z * z / offered
    centre = (p + z2n / 2) / (1 + z2n)
    half = z / (1 + z2n) * math.sqrt(p * (1 - p) / offered + z * z / (4 * offered * offered))
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(slots=True)
class Pool:
    """Every run at one load: their (met, offered) counts."""

    runs: list[tuple[int, int]] = field(default_factory=list)

    @property
    def met(self) -> int:
        return sum(m for m, _ in self.runs)

    @property
    def offered(self) -> int:
        return sum(n for _, n in self.runs)

    @property
    def attainment(self) -> float:
        return self.met / self.offered

    def chi_square(self) -> tuple[float, int]:
        """Pearson's chi-square of the runs against their pooled attainment, and its degrees of freedom (0 when
        there is one run or the pooled attainment is 0 or 1: nothing to learn the dispersion from)."""
        p = self.attainment
        if len(self.runs) < 2 or p in (0.0, 1.0):
            return 0.0, 0
        return sum((m - n * p) ** 2 / (n * p * (1 - p)) for m, n in self.runs), len(self.runs) - 1


def dispersion(pools: dict[float, Pool]) -> float:
    """The quasi-binomial dispersion factor: pooled chi-square ÷ degrees of freedom over loads run more than once;
    never below 1 (runs vary at least as the binomial says)."""
    chi, df = 0.0, 0
    for pool in pools.values():
        c, d = pool.chi_square()
        chi, df = chi + c, df + d
    return max(1.0, chi / df) if df else 1.0


def binomial_spread(attainment: float, requests: int, slope: float, phi: float = 1.0) -> float:
    """The within-run term: the standard deviation, as a share of the load, of where a search puts the crossing
    from the counts alone: the pooled attainment's error ``sqrt(phi p (1 - p) / requests)`` divided by the curve's
    slope per unit of relative load (``slope``: how much attainment drops when the load grows by 100%)."""
    _positive("slope", slope)
    return math.sqrt(phi * attainment * (1 - attainment) / requests) / slope


def search_spread(binomial: float, width: float, reference: float, floor: float) -> float:
    """The capacity's standard deviation from search to search, as a share of it: the independent terms added in
    quadrature: ``binomial`` (:func:`binomial_spread`), the bracket's quantisation (the edge lies anywhere in a
    bracket of relative ``width``: a uniform's sd, ``width / sqrt(12)``), the ``reference`` term (for the absolute
    capacity the machine's drift over the run, :func:`drift`; for the relative one, where the drift cancels, the
    standard error of its run-by-run ratios, :func:`ratio_error`) and the between-search ``floor`` measured from
    repeated searches."""
    for name, value in (("binomial", binomial), ("width", width), ("reference", reference), ("floor", floor)):
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
            raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return math.sqrt(binomial ** 2 + width ** 2 / 12 + reference ** 2 + floor ** 2)


def ratio_error(ratios: list[float]) -> float:
    """The standard error of the mean of ``ratios`` as a share of it (sample sd / sqrt(n) / mean): how well the
    runs at the capacity load pin the relative capacity (each ratio carries its reference round's own noise);
    0 with fewer than two."""
    if len(ratios) < 2:
        return 0.0
    mean = sum(ratios) / len(ratios)
    return math.sqrt(sum((r - mean) ** 2 for r in ratios) / (len(ratios) - 1) / len(ratios)) / mean


def drift(rates: list[float]) -> float:
    """How much the machine's speed moved over a run: the coefficient of variation (population sd / mean) of the
    reference rates its probes measured; 0 with fewer than two."""
    if len(rates) < 2:
        return 0.0
    mean = sum(rates) / len(rates)
    return math.sqrt(sum((r - mean) ** 2 for r in rates) / len(rates)) / mean


def bracket_slope(pools: dict[float, Pool], low: float, high: float) -> float | None:
    """How fast attainment falls across the bracket, per unit of relative load (0.3 = 3 points per 10% more load):
    the secant ``(attainment at low - attainment at high) / ((high - low) / low)`` of the two ends' pooled
    attainments. A cliff (100% at low, 10% at high) is steep; ends within noise of each other give a shallow slope
    and so a wide expected spread, as they should. None without both ends or when the ends are not in order (the
    noise there is larger than the fall)."""
    if not (0 < low < high < math.inf and low in pools and high in pools):
        return None
    fall = (pools[low].attainment - pools[high].attainment) / ((high - low) / low)
    return fall if fall > 0 else None


@dataclass(slots=True)
class Capacity:
    """The search's answer: ``max_load`` (the bracket's low end: it met the target) and ``bracket_high``."""

    settings: SearchSettings
    max_load: float = 0.0
    bracket_high: float = math.inf
    attainment_at_max_load: float = 0.0  # pooled over its runs
    max_request_rate: float = 0.0
    converged: bool = False
    why: str = ""  # why it did not converge
    probes: list[tuple[float, float]] = field(default_factory=list)  # (load, attainment) of every run, in order
    pools: dict[float, Pool] = field(default_factory=dict)  # load -> its runs' counts
    runs: dict[float, list[ProbeResult]] = field(default_factory=dict)  # load -> every run there, in order
    undecided: list[float] = field(default_factory=list)  # loads decided on the point estimate after all repeats
    dispersion: float = 1.0  # the quasi-binomial factor at the end of the search
    search_s: float = 0.0

    @property
    def width(self) -> float:
        """The bracket's width relative to its low end (inf when it has none)."""
        return (self.bracket_high - self.max_load) / self.max_load if self.max_load > 0 else math.inf

    @property
    def requests_at_max_load(self) -> int:
        return self.pools[self.max_load].offered if self.max_load in self.pools else 0

    @property
    def slope(self) -> float | None:
        return bracket_slope(self.pools, self.max_load, self.bracket_high)

    @property
    def binomial_spread(self) -> float | None:
        """The within-run term (:func:`binomial_spread` at the target, the requests pooled at the capacity, the
        slope and dispersion measured); None when the slope is not known."""
        slope, n = self.slope, self.requests_at_max_load
        return None if slope is None or not n else binomial_spread(self.settings.target, n, slope, self.dispersion)

    @property
    def references(self) -> list[float]:
        """Every probe's reference rate (requests/s served saturated, in the probe's process), in run order."""
        return [r.reference_rate for runs in self.runs.values() for r in runs if r.reference_rate is not None]

    @property
    def reference_drift(self) -> float:
        return drift(self.references)

    @property
    def reference_rate(self) -> float | None:
        """The mean reference rate of the runs at the capacity load; None when they measured none."""
        refs = [r.reference_rate for r in self.runs.get(self.max_load, []) if r.reference_rate is not None]
        return sum(refs) / len(refs) if refs else None

    @property
    def ratios(self) -> list[float]:
        """Each run at the capacity load: its offered rate ÷ its own process's reference rate."""
        return [r.request_rate / r.reference_rate for r in self.runs.get(self.max_load, [])
                if r.reference_rate is not None and r.request_rate > 0]

    @property
    def relative_capacity(self) -> float | None:
        """The offered rate at the capacity as a share of the rate the machine served saturated, each run at the
        capacity load divided by its own process's reference (so a machine slower for that run counts as such),
        then averaged; None without references there."""
        ratios = self.ratios
        return sum(ratios) / len(ratios) if ratios else None

    def _spread(self, reference: float, floor: float) -> float | None:
        if self.max_load <= 0 or not math.isfinite(self.width):
            return None
        return search_spread(self.binomial_spread or 0.0, self.width, reference, floor)

    @property
    def spread(self) -> float | None:
        """The absolute capacity's expected standard deviation from search to search, as a share of it
        (:func:`search_spread`: binomial, bracket width, the reference's drift over the run, ``ABSOLUTE_FLOOR``);
        None without a bracket."""
        return self._spread(self.reference_drift, ABSOLUTE_FLOOR)

    @property
    def relative_spread(self) -> float | None:
        """The relative capacity's: as :attr:`spread` with the ratios' standard error (:func:`ratio_error`) in
        place of the drift, which the reference cancels, and ``RELATIVE_FLOOR``; None without a bracket or a
        reference."""
        return None if self.relative_capacity is None else self._spread(ratio_error(self.ratios), RELATIVE_FLOOR)

    def section(self) -> dict[str, float | bool | str]:
        """The ``capacity`` section of the results record (its catalogue entries: measure/catalogue.py); the slope
        and binomial spread only when the bracket's ends measured a fall, the reference's figures only when the
        probes ran one."""
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
            "requests_at_max_load": self.requests_at_max_load,
            "dispersion": self.dispersion,
        }
        if (slope := self.slope) is not None and (binomial := self.binomial_spread) is not None:
            out |= {"slope": slope, "binomial_spread": binomial}
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
        low = self.pools.get(self.max_load)
        pooled = f" over {low.offered} requests" if low else ""
        head = (f"capacity {self.max_load:.4g} x load (bracket [{self.max_load:.4g}, {self.bracket_high:.4g}], "
                f"attainment >= {s.target:.0%}, resolution {s.resolution:.0%}): {self.max_request_rate:.4g} req/s "
                f"offered, attainment {self.attainment_at_max_load:.1%}{pooled}; {len(self.probes)} probes in "
                f"{self.search_s:.0f} s, dispersion {self.dispersion:.2g}")
        if (binomial := self.binomial_spread) is not None:
            head += f"; slope {self.slope:.2g}/100% load, binomial spread ±{binomial:.1%}"
        if (relative := self.relative_capacity) is not None:
            head += (f"; relative capacity {relative:.3g} of the {self.reference_rate:.3g} req/s served saturated "
                     f"(reference drift ±{self.reference_drift:.1%} over the run)")
        if (spread := self.spread) is not None:
            head += f"; expected spread ±{spread:.1%} of the load (1 sd)"
            if (relative_spread := self.relative_spread) is not None:
                head += f", ±{relative_spread:.1%} relative"
            # two searches differ by sqrt(2) sd; within the resolution about 95% of the time at 2 sd of that
            head += (f": {'within' if 2 * math.sqrt(2) * spread <= s.resolution else 'WIDER than'} the resolution "
                     f"for two searches")
        if self.undecided:
            head += (f"; within noise of the target after {s.repeats} runs at load "
                     f"{', '.join(f'{x:.4g}' for x in self.undecided)} (decided on the pooled attainment)")
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

    def run(load: float) -> None:
        nonlocal longest
        if clock() - began + longest > s.budget_s:
            raise _OutOfTime(f"the budget of {s.budget_s:.0f} s ran out")
        t0 = clock()
        got = probe(load)
        longest = max(longest, clock() - t0)
        result.probes.append((load, got.attainment))
        result.pools.setdefault(load, Pool()).runs.append((got.met, got.offered))
        result.runs.setdefault(load, []).append(got)
        rates.setdefault(load, got.request_rate)

    def meets(load: float, least: int = 1) -> tuple[bool, float]:
        """Whether ``load`` meets the target, running it at least ``least`` times and again while its interval
        straddles the target; and its pooled attainment."""
        run(load)
        pool = result.pools[load]
        while len(pool.runs) < least:
            run(load)
        while True:
            lo, hi = wilson(pool.attainment, pool.offered / dispersion(result.pools), s.confidence)
            if lo >= s.target or hi < s.target:
                return lo >= s.target, pool.attainment
            if len(pool.runs) >= s.repeats:
                result.undecided.append(load)
                return pool.attainment >= s.target, pool.attainment
            run(load)

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
            ok, value = meets(mid, s.bisect_runs)
            if ok:
                low, at_low = mid, value
            else:
                high = mid
        result.converged = True
    except _OutOfTime as stop:
        result.why = str(stop)
    result.max_load, result.bracket_high, result.attainment_at_max_load = low, high, at_low
    result.max_request_rate = rates.get(low, 0.0)
    result.dispersion = dispersion(result.pools)
    result.search_s = clock() - began
    return result
