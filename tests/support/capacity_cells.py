"""Simulated cells for the capacity search: a known capacity, request outcomes drawn from a known attainment curve
plus noise (seeded numpy), a fake clock; no processes and no timing.

``shape="linear"``: attainment = TARGET + slope × (1 − load / capacity), clipped to [0, 1] (a curve the fit's
logistic does not have: it reaches 100% a little below the capacity); ``shape="logistic"``: the fit's own family,
with the same slope at the crossing. ``slope`` is the drop in attainment per unit of relative load at the
crossing (3: 30 points per 10% more load). Each run offers ``n`` requests and meets Binomial(n, p) of them, where p
is the true attainment plus, optionally, a run-level Gaussian shift of ``tau`` (the machine: fresh processes vary
more than the binomial).

``speed_sd``: each run's process has its own speed v (log-normal, this sd), which moves the run's capacity to
capacity × v^``elasticity`` (under SLOs a slower process loses more capacity than speed: studies/capacity-repeat)
and its reference round to ``reference`` × v × a round's own noise (``reference_noise``, log-normal sd): the
process-level noise the fit's speed effect takes out.
"""

from __future__ import annotations

import math
import statistics

import numpy as np

from batchperf.capacity.search import ProbeResult

TARGET = 0.9


class Cell:
    def __init__(self, capacity: float, slope: float = 3.0, n: int = 60, tau: float = 0.0, seed: int = 0,
                 seconds: float = 10.0, reference: float | None = None, shape: str = "linear",
                 speed_sd: float = 0.0, elasticity: float = 2.0, reference_noise: float = 0.0) -> None:
        self.capacity, self.slope, self.n, self.tau, self.seconds = capacity, slope, n, tau, seconds
        self.reference = reference  # req/s served saturated in each probe's process (None: no reference round)
        self.shape = shape
        self.speed_sd, self.elasticity, self.reference_noise = speed_sd, elasticity, reference_noise
        self.rng = np.random.default_rng(seed)
        self.now = 0.0
        self.loads: list[float] = []
        self.speeds: list[float] = []  # each run's process speed

    @property
    def searched_capacity(self) -> float:
        """The capacity at the runs' mean log speed: what a fit that takes each run's speed out estimates."""
        mean = statistics.fmean(math.log(v) for v in self.speeds) if self.speeds else 0.0
        return self.capacity * math.exp(self.elasticity * mean)

    def true(self, load: float, speed: float = 1.0) -> float:
        capacity = self.capacity * speed ** self.elasticity
        if self.shape == "logistic":  # logit p = logit(TARGET) - s log(load / capacity), s × 0.09 = slope
            steepness = self.slope / (TARGET * (1 - TARGET))
            return 1 / (1 + math.exp(-(math.log(TARGET / (1 - TARGET)) - steepness * math.log(load / capacity))))
        return float(np.clip(TARGET + self.slope * (1 - load / capacity), 0.0, 1.0))

    def __call__(self, load: float) -> ProbeResult:
        self.loads.append(load)
        self.now += self.seconds
        speed = float(np.exp(self.rng.normal(0.0, self.speed_sd))) if self.speed_sd else 1.0
        self.speeds.append(speed)
        p = self.true(load, speed)
        if self.tau:
            p = float(np.clip(p + self.rng.normal(0.0, self.tau), 0.0, 1.0))
        reference = self.reference
        if reference is not None and (self.speed_sd or self.reference_noise):
            reference *= speed * float(np.exp(self.rng.normal(0.0, self.reference_noise)))
        return ProbeResult(int(self.rng.binomial(self.n, p)), self.n, request_rate=4.0 * load,
                           reference_rate=reference)

    def clock(self) -> float:
        return self.now
