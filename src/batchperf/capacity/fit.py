"""The capacity estimate from every probe: a logistic curve of SLO attainment against log-load, fitted to the
request-level outcomes (met / missed) of all probes, and the load where it crosses the target.

The model, for a probe at load ``L`` offering ``n`` requests of which ``m`` met their SLOs, in a process whose
saturated reference round served ``r`` requests/s::

    m ~ Binomial(n, p(L)),   logit p(L) = logit(target) - s × (log L - theta) + c × (log r - mean log r)

``theta`` is the log of the capacity itself (at the search's mean reference, the fitted attainment is exactly the
target at ``L = e^theta``) and ``s > 0`` is the steepness in log-load (``s × 0.09`` points of attainment lost per
100% more load at a 90% target). Fitting the crossing directly, rather than an intercept and a slope, makes the
capacity's interval a profile over one parameter.

Runs of one cell in fresh processes vary more than the binomial: the machine is part of the noise, and part of
that is the process's own speed (the probes' misfits correlate with their reference rates in each of nine searches,
+0.25 to +0.83: studies/capacity-repeat, "The speed effect"). The reference round in each probe's process reads
that speed, so ``c`` (the *speed effect*) takes out of the fit what each process's speed explains.
It is centred on the search's own mean, so a slower engine, whose every reference reads lower, keeps its whole
loss in ``theta``: only the probes' differences from each other are explained. Without a reference for every probe
``c`` is 0 (the curve of issue 57's first searches).

What is left over is quasi-likelihood: the dispersion ``phi = max(1, Pearson X² / (probes - k))`` (``k`` = 3 with
the speed effect, 2 without) scales the deviance, and the cut-off is F(confidence; 1, probes - k), wider than
chi-square's while few probes measure ``phi``. The interval holds every ``theta`` whose profile deviance (``s`` and
``c`` refitted) is within ``phi × F`` of the minimum (McCullagh & Nelder, 1989, §9.3: profile likelihood under
overdispersion). A cliff (every probe 100% or 0%, the MLE's slope unbounded) is held by the slope's upper bound:
the interval is then the gap between the probes that met and those that missed, as bisection's bracket was.
docs/traffic.md, "The estimator", argues the choice.
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
_LOG_SLOPE = (math.log(SLOPE_BOUNDS[0]), math.log(SLOPE_BOUNDS[1]))  # the bounds of log s, where the fit works
# Bounds of the speed effect c: the logit of attainment per unit of log reference rate (18 searches on the CPU
# tier on two hosts fitted -2.4 to 6.3; 100 is far beyond what a process's speed can do: 10% faster, 10 logits)
SPEED_BOUNDS = (-100.0, 100.0)
# The speed effect is fitted from this many probes on: with fewer, a third parameter fits the probes' noise exactly
# and the crossing it leaves (where the search places its next probe) is anywhere
SPEED_MIN_PROBES = 6


def _positive(name: str, value: float) -> None:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")


@dataclass(frozen=True, slots=True)
class Outcomes:
    """Every probe's requests: its load, how many met their SLOs, how many were offered (one entry a run)."""

    loads: tuple[float, ...]
    met: tuple[int, ...]
    offered: tuple[int, ...]
    speeds: tuple[float, ...] | None = None  # each probe's reference rate (its process's speed); None: not known

    def __post_init__(self) -> None:
        if not len(self.loads) == len(self.met) == len(self.offered):
            raise ValueError(f"outcomes: loads, met and offered must be as long, got {len(self.loads)}, "
                             f"{len(self.met)}, {len(self.offered)}")
        if self.speeds is not None and len(self.speeds) != len(self.loads):
            raise ValueError(f"outcomes: speeds must be one a probe, got {len(self.speeds)} for {len(self.loads)}")
        for load in self.loads:
            _positive("outcomes: a probe's load", load)
        for speed in self.speeds or ():
            _positive("outcomes: a probe's speed", speed)
        for m, n in zip(self.met, self.offered, strict=True):
            if not 0 <= m <= n or n < 1:
                raise ValueError(f"outcomes: a probe's met must lie in [0, offered >= 1], got {m} of {n}")

    def __len__(self) -> int:
        return len(self.loads)


class _Curve:
    """The negative log-likelihood of (theta, log s, c) over the outcomes, and its gradient (numpy on a few probes).
    ``c`` is fixed at 0 when the probes' speeds are not known or all equal (``free``: the parameters fitted)."""

    def __init__(self, outcomes: Outcomes, target: float) -> None:
        self.x = np.log(np.asarray(outcomes.loads, dtype=float))
        self.m = np.asarray(outcomes.met, dtype=float)
        self.n = np.asarray(outcomes.offered, dtype=float)
        speeds = np.log(np.asarray(outcomes.speeds if outcomes.speeds else [1.0] * len(outcomes), dtype=float))
        self.z = speeds - float(np.mean(speeds))
        self.speed = len(outcomes) >= SPEED_MIN_PROBES and bool(np.any(np.abs(self.z) > 1e-12))
        self._start = np.array([10.0, 0.0])  # (s, c) where the next profile's Newton starts: the last optimum
        self.base = float(special.logit(target))

    @property
    def free(self) -> int:
        return 3 if self.speed else 2

    def eta(self, theta: float, s: float, c: float = 0.0) -> np.ndarray:
        return self.base - s * (self.x - theta) + c * self.z

    def nll(self, theta: float, s: float, c: float = 0.0) -> float:
        eta = self.eta(theta, s, c)
        # log p = log_expit(eta), log (1 - p) = log_expit(-eta): exact in the tails, where a cliff puts its probes
        return -float(np.sum(self.m * special.log_expit(eta) + (self.n - self.m) * special.log_expit(-eta)))

    def _resid(self, theta: float, s: float, c: float) -> np.ndarray:
        return self.m - self.n * special.expit(self.eta(theta, s, c))  # d(-nll)/d(eta)

    def nll_and_grad(self, params: np.ndarray) -> tuple[float, np.ndarray]:
        """Over (theta, log s[, c])."""
        theta, s = float(params[0]), math.exp(float(params[1]))
        c = float(params[2]) if len(params) > 2 else 0.0
        resid = self._resid(theta, s, c)
        grad = [-s * float(np.sum(resid)), s * float(np.sum(resid * (self.x - theta)))]
        if len(params) > 2:
            grad.append(-float(np.sum(resid * self.z)))
        return self.nll(theta, s, c), np.array(grad)

    def bounds(self, lo_x: float, hi_x: float) -> list[tuple[float, float]]:
        return [(lo_x, hi_x), _LOG_SLOPE, SPEED_BOUNDS][:self.free]

    def profile(self, theta: float) -> float:
        """The smallest negative log-likelihood at ``theta``, the steepness (and the speed effect) refitted."""
        if not self.speed:
            best = optimize.minimize_scalar(lambda u: self.nll(theta, math.exp(u)), bounds=_LOG_SLOPE,
                                            method="bounded", options={"xatol": 1e-3})
            return float(best.fun)

        found = self._newton(theta)
        return found if found is not None else self._tnc(theta)

    def _tnc(self, theta: float) -> float:
        def inner(params: np.ndarray) -> tuple[float, np.ndarray]:
            value, grad = self.nll_and_grad(np.array([theta, params[0], params[1]]))
            return value, grad[1:]

        best = optimize.minimize(inner, np.array([math.log(10.0), 0.0]), jac=True, method="TNC",
                                 bounds=[_LOG_SLOPE, SPEED_BOUNDS])
        return float(best.fun)

    def start_at(self, s: float, c: float) -> None:
        self._start = np.array([s, c])

    def _newton(self, theta: float) -> float | None:
        """The profile at ``theta`` with the speed effect by Newton's method on (s, c): at a fixed theta the
        curve's logit is linear in both, so the negative log-likelihood is convex there and Newton, started from
        the last theta's optimum, takes a few steps (TNC's 20 times slower: the search fits after every probe).
        None when a step leaves the bounds or stops descending (a cliff): the caller asks TNC."""
        a, w = -(self.x - theta), self._start
        value = self.nll(theta, *w)
        for _ in range(50):
            p = special.expit(self.base + w[0] * a + w[1] * self.z)
            r, v = self.m - self.n * p, self.n * p * (1 - p)
            grad = -np.array([np.sum(r * a), np.sum(r * self.z)])
            cross = np.sum(v * a * self.z)
            hess = np.array([[np.sum(v * a * a), cross], [cross, np.sum(v * self.z ** 2)]])
            try:
                step = np.linalg.solve(hess, grad)
            except np.linalg.LinAlgError:
                return None
            for _ in range(30):  # halve the step until it descends
                new = w - step
                if SLOPE_BOUNDS[0] <= new[0] <= SLOPE_BOUNDS[1] and SPEED_BOUNDS[0] <= new[1] <= SPEED_BOUNDS[1]:
                    if (got := self.nll(theta, *new)) <= value + 1e-12:
                        break
                step = step / 2
            else:
                return None
            w, done = new, value - got < 1e-10
            value = got
            if done:
                self._start = w
                return value
        return None

    def pearson(self, theta: float, s: float, c: float = 0.0) -> float:
        p = special.expit(self.eta(theta, s, c))
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
    df: int  # probes - 2 (- 1 more with the speed effect): the degrees of freedom phi is measured on
    target: float
    speed_effect: float | None = None  # c: logits of attainment per unit of log reference rate; None: not fitted

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
    start = np.array([_first_guess(outcomes, target), math.log(10.0), 0.0][:curve.free])
    best = optimize.minimize(curve.nll_and_grad, start, jac=True, method="TNC", bounds=curve.bounds(lo_x, hi_x))
    theta, s = float(best.x[0]), math.exp(float(best.x[1]))
    c = float(best.x[2]) if curve.speed else 0.0
    curve.start_at(s, c)
    nll_min = min(float(best.fun), curve.profile(theta))
    df = len(outcomes) - curve.free
    phi = max(1.0, curve.pearson(theta, s, c) / df) if df > 0 else 1.0
    # F(1, df) where phi is measured on df degrees of freedom; with none left, chi-square at phi = 1: a fit on two
    # probes claims only what the binomial says, and the search never stops on it (search.MIN_PLACED)
    cut = phi * (float(stats.f.ppf(confidence, 1, df)) if df > 0 else float(stats.chi2.ppf(confidence, 1)))
    excess = lambda t: 2 * (curve.profile(t) - nll_min) - cut  # noqa: E731 - the root's function, used twice
    low, high = (math.exp(_end(excess, theta, bound)) for bound in (lo_x, hi_x))
    return Fit(math.exp(theta), low, high, confidence, s, phi, df, target, c if curve.speed else None)


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


def outcomes_of(runs: Sequence[tuple[float, int, int]], speeds: Sequence[float | None] | None = None) -> Outcomes:
    """(load, met, offered) of each run as :class:`Outcomes`, with each run's ``speeds`` (reference rate) when
    every run has one."""
    known = None if speeds is None or any(v is None for v in speeds) else tuple(float(v) for v in speeds)
    return Outcomes(tuple(x for x, _, _ in runs), tuple(m for _, m, _ in runs), tuple(n for _, _, n in runs), known)
