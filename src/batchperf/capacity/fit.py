"""The capacity estimate from every probe: a logistic curve of SLO attainment against log-load, fitted to the
request-level outcomes (met / missed) of all probes, and the load where it crosses the target.

The model, for a probe at load ``L`` offering ``n`` requests of which ``m`` met their SLOs::

    m ~ Binomial(n, p(L)),   logit p(L) = logit(target) - s × (log L - theta)

``theta`` is the log of the capacity itself (the fitted attainment is exactly the target at ``L = e^theta``) and
``s > 0`` is the steepness in log-load (``s × 0.09`` points of attainment lost per 100% more load at a 90% target).
Fitting the crossing directly, rather than an intercept and a slope, makes the capacity's interval a profile over
one parameter.

Runs of one cell in fresh processes vary more than the binomial (the machine is part of the noise), so the
interval is a quasi-likelihood one: the dispersion ``phi = max(1, Pearson X² / (probes - 2))`` scales the deviance,
and the cut-off is F(confidence; 1, probes - 2), wider than chi-square's while few probes measure ``phi``. The
interval holds every ``theta`` whose profile deviance (``s`` refitted) is within ``phi × F`` of the minimum
(McCullagh & Nelder, 1989, §9.3: profile likelihood under overdispersion). A cliff (every probe 100% or 0%, the
MLE's slope unbounded) is held by the slope's upper bound: the interval is then the gap between the probes that met
and those that missed, as bisection's bracket was. docs/traffic.md, "The estimator", argues the choice.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import optimize, special, stats

# Bounds of the steepness s, in log-load: 0.5 is nearly flat (attainment 90% -> 50% over a 80-fold load); 1000
# is a cliff (90% -> 10% within 0.5% of load: finer than any resolution a search is asked for).
SLOPE_BOUNDS = (0.5, 1000.0)


def _positive(name: str, value: float) -> None:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")


@dataclass(frozen=True, slots=True)
class Outcomes:
    """Every probe's requests: its load, how many met their SLOs, how many were offered (one entry a run)."""

    loads: tuple[float, ...]
    met: tuple[int, ...]
    offered: tuple[int, ...]

    def __post_init__(self) -> None:
        if not len(self.loads) == len(self.met) == len(self.offered):
            raise ValueError(f"outcomes: loads, met and offered must be as long, got {len(self.loads)}, "
                             f"{len(self.met)}, {len(self.offered)}")
        for load in self.loads:
            _positive("outcomes: a probe's load", load)
        for m, n in zip(self.met, self.offered, strict=True):
            if not 0 <= m <= n or n < 1:
                raise ValueError(f"outcomes: a probe's met must lie in [0, offered >= 1], got {m} of {n}")

    def __len__(self) -> int:
        return len(self.loads)


class _Curve:
    """The negative log-likelihood of (theta, log s) over the outcomes, and its gradient (numpy on a few probes)."""

    def __init__(self, outcomes: Outcomes, target: float) -> None:
        self.x = np.log(np.asarray(outcomes.loads, dtype=float))
        self.m = np.asarray(outcomes.met, dtype=float)
        self.n = np.asarray(outcomes.offered, dtype=float)
        self.base = float(special.logit(target))

    def eta(self, theta: float, s: float) -> np.ndarray:
        return self.base - s * (self.x - theta)

    def nll(self, theta: float, s: float) -> float:
        eta = self.eta(theta, s)
        # log p = log_expit(eta), log (1 - p) = log_expit(-eta): exact in the tails, where a cliff puts its probes
        return -float(np.sum(self.m * special.log_expit(eta) + (self.n - self.m) * special.log_expit(-eta)))

    def nll_and_grad(self, params: np.ndarray) -> tuple[float, np.ndarray]:
        theta, s = float(params[0]), math.exp(float(params[1]))
        resid = self.m - self.n * special.expit(self.eta(theta, s))  # d(-nll)/d(eta)
        grad = np.array([-s * float(np.sum(resid)), s * float(np.sum(resid * (self.x - theta)))])
        return self.nll(theta, s), grad

    def profile(self, theta: float) -> float:
        """The smallest negative log-likelihood at ``theta``, the steepness refitted."""
        bounds = tuple(math.log(b) for b in SLOPE_BOUNDS)
        best = optimize.minimize_scalar(lambda u: self.nll(theta, math.exp(u)), bounds=bounds, method="bounded",
                                        options={"xatol": 1e-3})
        return float(best.fun)

    def pearson(self, theta: float, s: float) -> float:
        p = special.expit(self.eta(theta, s))
        var = np.maximum(self.n * p * (1 - p), 1e-12)
        return float(np.sum((self.m - self.n * p) ** 2 / var))


@dataclass(frozen=True, slots=True)
class Fit:
    """The fitted curve's crossing of the target and its interval (load factors), with what the fit measured."""

    capacity: float  # the load where the fitted attainment equals the target
    low: float  # the interval's ends at ``confidence``; the search's load range where the data do not close it
    high: float
    confidence: float
    steepness: float  # s: per unit of log-load
    dispersion: float  # phi >= 1: how much more than the binomial the probes vary about the curve
    df: int  # probes - 2: the degrees of freedom phi is measured on
    target: float

    @property
    def width(self) -> float:
        """The interval's width as a share of the capacity."""
        return (self.high - self.low) / self.capacity

    @property
    def sd(self) -> float:
        """The capacity's standard deviation as a share of it, read from the interval: its log-width over the
        normal quantiles of its confidence (the interval is on log-load, so this is a relative figure)."""
        z = float(stats.norm.ppf(0.5 + self.confidence / 2))
        return math.log(self.high / self.low) / (2 * z)

    @property
    def slope(self) -> float:
        """Attainment lost per unit of relative load at the crossing (``capacity.slope``: 3 = 30 points per 10%
        more load): ``s × target × (1 - target)``."""
        return self.steepness * self.target * (1 - self.target)

    def attainment(self, load: float) -> float:
        return float(special.expit(special.logit(self.target) - self.steepness * math.log(load / self.capacity)))


def fit(outcomes: Outcomes, target: float, confidence: float, load_range: tuple[float, float]) -> Fit:
    """Fit the curve to ``outcomes`` (at least one run met the target and one missed it, at different loads), and
    the capacity's interval at ``confidence``, clipped to ``load_range`` (the search's min and max load)."""
    if not 0 < target < 1:
        raise ValueError(f"fit: target must be in (0, 1), got {target}")
    if not 0 < confidence < 1:
        raise ValueError(f"fit: confidence must be in (0, 1), got {confidence}")
    if len(set(outcomes.loads)) < 2:
        raise ValueError(f"fit: the outcomes need two loads at least, got {sorted(set(outcomes.loads))}")
    curve = _Curve(outcomes, target)
    lo_x, hi_x = math.log(load_range[0]), math.log(load_range[1])
    # TNC: a bounded Newton method in C that needs no BLAS (L-BFGS-B's BLAS threads cost 7 ms a step on a busy
    # 2-core machine, 20 times the fit itself)
    start = np.array([_first_guess(outcomes, target), math.log(10.0)])
    best = optimize.minimize(curve.nll_and_grad, start, jac=True, method="TNC",
                             bounds=[(lo_x, hi_x), tuple(math.log(b) for b in SLOPE_BOUNDS)])
    theta, s = float(best.x[0]), math.exp(float(best.x[1]))
    nll_min = min(float(best.fun), curve.profile(theta))
    df = len(outcomes) - 2
    phi = max(1.0, curve.pearson(theta, s) / df) if df > 0 else 1.0
    # F(1, df) where phi is measured on df degrees of freedom; with none left, chi-square at phi = 1: a fit on two
    # probes claims only what the binomial says, and the search never stops on it (search.MIN_PLACED)
    cut = phi * (float(stats.f.ppf(confidence, 1, df)) if df > 0 else float(stats.chi2.ppf(confidence, 1)))
    excess = lambda t: 2 * (curve.profile(t) - nll_min) - cut  # noqa: E731 - the root's function, used twice
    low, high = (math.exp(_end(excess, theta, bound)) for bound in (lo_x, hi_x))
    return Fit(math.exp(theta), low, high, confidence, s, phi, df, target)


def _first_guess(outcomes: Outcomes, target: float) -> float:
    """Log of a load between the highest that met the target and the lowest above it that missed it."""
    met = [x for x, m, n in zip(outcomes.loads, outcomes.met, outcomes.offered, strict=True) if m >= target * n]
    missed = [x for x, m, n in zip(outcomes.loads, outcomes.met, outcomes.offered, strict=True) if m < target * n]
    if not met or not missed:
        return math.log(max(met) if met else min(missed))
    return (math.log(max(met)) + math.log(min(missed))) / 2


def _end(excess, theta: float, bound: float) -> float:
    """Where ``excess`` (the profile deviance beyond the cut) reaches 0 going from ``theta`` towards ``bound``;
    ``bound`` when it does not before."""
    if excess(bound) <= 0:
        return bound
    step, inside = 0.01 * math.copysign(1.0, bound - theta), theta
    while True:
        outside = theta + step
        if (outside - bound) * step >= 0:
            return optimize.brentq(excess, inside, bound, xtol=1e-5)
        if excess(outside) > 0:
            return optimize.brentq(excess, inside, outside, xtol=1e-5)
        inside, step = outside, step * 2


def outcomes_of(runs: Sequence[tuple[float, int, int]]) -> Outcomes:
    """(load, met, offered) of each run as :class:`Outcomes`."""
    return Outcomes(tuple(x for x, _, _ in runs), tuple(m for _, m, _ in runs), tuple(n for _, _, n in runs))
