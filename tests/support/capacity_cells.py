"""Simulated cells for the capacity search: a known capacity, request outcomes drawn from a known attainment curve
plus noise (seeded numpy), a fake clock; no processes and no timing.

``shape="linear"``: attainment = TARGET + slope × (1 − load / capacity), clipped to [0, 1] (a curve the fit's
logistic does not have: it reaches 100% a little below the capacity); ``shape="logistic"``: the fit's own family,
with the same slope at the crossing. ``slope`` is the drop in attainment per unit of relative load at the
crossing (3: 30 points per 10% more load). Each run offers ``n`` requests and meets Binomial(n, p) of them, where p
is the true attainment plus, optionally, a run-level Gaussian shift of ``tau`` (the machine: fresh processes vary
more than the binomial).
"""

from __future__ import annotations

import math

import numpy as np

from batchperf.capacity.search import ProbeResult

TARGET = 0.9


class Cell:
    def __init__(self, capacity: float, slope: float = 3.0, n: int = 60, tau: float = 0.0, seed: int = 0,
                 seconds: float = 10.0, reference: float | None = None, shape: str = "linear") -> None:
        self.capacity, self.slope, self.n, self.tau, self.seconds = capacity, slope, n, tau, seconds
        self.reference = reference  # req/s served saturated in each probe's process (None: no reference round)
        self.shape = shape
        self.rng = np.random.default_rng(seed)
        self.now = 0.0
        self.loads: list[float] = []

    def true(self, load: float) -> float:
        if self.shape == "logistic":  # logit p = logit(TARGET) - s log(load / capacity), s × 0.09 = slope
            steepness = self.slope / (TARGET * (1 - TARGET))
            return 1 / (1 + math.exp(-(math.log(TARGET / (1 - TARGET)) - steepness * math.log(load / self.capacity))))
        return float(np.clip(TARGET + self.slope * (1 - load / self.capacity), 0.0, 1.0))

    def __call__(self, load: float) -> ProbeResult:
        self.loads.append(load)
        self.now += self.seconds
        p = self.true(load)
        if self.tau:
            p = float(np.clip(p + self.rng.normal(0.0, self.tau), 0.0, 1.0))
        return ProbeResult(int(self.rng.binomial(self.n, p)), self.n, request_rate=4.0 * load,
                           reference_rate=self.reference)

    def clock(self) -> float:
        return self.now
