"""``aimd``: the running cap from measured step latency, additive increase and multiplicative decrease.

Clipper's AIMD batching (Crankshaw et al., NSDI 2017) is the anchor: grow the batch additively while the
latency objective is met, cut it by a factor when it is missed. Here the batch is the running cap; every
``window`` steps the mean measured step duration (ms) is compared with the target:

- above the target: ``cap = max(min_cap, floor(cap * decrease))``;
- at or below it, and the cap was what kept requests waiting in at least one of those steps:
  ``cap = min(max_cap, cap + step)`` (a cap nobody pressed against is not grown: an idle engine would
  otherwise drift to ``max_cap`` and meet the next burst there, as TCP's congestion-window validation avoids);
  until the first decrease (``slow_start``, TCP's slow start, RFC 5681) the cap doubles instead, so a run that
  starts into a queue reaches a cap of 16 in 4 windows, not 15 (with +1 a window the ramp is 60 steps, which
  the policy study first suspected in a 45% against 68% at 3.5× load; repeated, that cell swings more than
  that from run to run, studies/policies/README.md);
- else unchanged.

A step's duration is the inter-token time of every request it decodes, so the target is the tightest tenant's
TPOT, or half the tightest TTFT when that is tighter or the only one (``PolicyContext.step_target_ms``);
``target_ms`` overrides it and is required when the tenants have neither. The offered load is never read.
When the cap falls below the requests running, the oldest run and the rest keep their blocks and wait (no
recompute). The token budget is the engine's ``max_step_tokens``, unchanged.

Defaults (batchperf's): ``step=1``, ``decrease=0.9`` (Clipper cuts by 10%), ``min_cap=1``, ``max_cap`` = the
cell's batch size (run aimd in the cell of the largest static cap it should be able to reach, e.g. 16, so the
KV pool is sized for it), ``start`` = ``max_cap``, ``window=4`` steps, ``slow_start=1`` (0: additive from the
first window, Clipper's plain AIMD; it matters only for a ``start`` below ``max_cap``).

Why it starts at ``max_cap``: the largest cap the backend sized its KV pool for is safe to hold, and AIMD cuts it
after the first window that misses. Starting from 1 instead loses the ramp's steps at the start of a run, which
an overloaded queue never wins back: every later request waits that much longer. Measured side by side on the
CPU tier's steady Poisson cell past its capacity (studies/policies/README.md, 5 rounds each in one run): from 1 (slow start)
aimd read 53.1% and 33.1% at loads 5 and 7 against static 16's 70.6% and 38.1%; from 16, 65.0% and 38.1%.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from batchperf.engine.policies.base import Param, Policy, PolicyContext, StepReport
from batchperf.engine.request import Request


class Aimd(Policy):
    name = "aimd"
    PARAMS = {
        "step": Param(int, 1, "additive increase per window that met the target", low=1),
        "decrease": Param(float, 0.9, "multiplicative decrease per window that missed it", low_open=True,
                          high=1, high_open=True),
        "min_cap": Param(int, 1, "the least cap", low=1),
        "max_cap": Param(int, None, "the largest cap; None: the cell's batch size", low=1),
        "start": Param(int, None, "the first cap; None: max_cap", low=1),
        "window": Param(int, 4, "steps per decision", low=1),
        "target_ms": Param(float, None, "the step latency target, ms; None: the tightest TPOT or TTFT/2",
                           low_open=True),
        "slow_start": Param(int, 1, "1: double the cap per pressed window until the first decrease; 0: additive",
                            high=1),
    }

    @classmethod
    def check_together(cls, params: Mapping[str, int | float | None]) -> None:
        low, high, start = params.get("min_cap"), params.get("max_cap"), params.get("start")
        if low is not None and high is not None and low > high:
            raise ValueError(f"aimd: min_cap ({low}) must be <= max_cap ({high})")
        for bound, ok in (("min_cap", low is None or start is None or start >= low),
                          ("max_cap", high is None or start is None or start <= high)):
            if not ok:
                raise ValueError(f"aimd: start ({start}) must lie in [min_cap, max_cap]; it is beyond {bound}")

    def __init__(self, ctx: PolicyContext, **params: int | float | None) -> None:
        params = {"max_cap": ctx.batch_size, "target_ms": ctx.step_target_ms()} | params
        if params["target_ms"] is None:
            raise ValueError("aimd: no target_ms and no tenant TPOT or TTFT SLO to derive it from; "
                             "give aimd:target_ms=... or a workload with SLOs")
        if params.get("start") is None:
            params["start"] = params["max_cap"]
        super().__init__(ctx, **params)
        self.current = int(self.params["start"])
        self.window: list[StepReport] = []
        self.low, self.high = self.current, self.current
        self.increases = self.decreases = 0

    def cap(self, waiting: Sequence[Request], running: Sequence[Request]) -> int:
        return self.current

    def observe(self, report: StepReport) -> None:
        self.window.append(report)
        if len(self.window) < self.params["window"]:
            return
        latency = sum(r.duration_ms for r in self.window) / len(self.window)
        pressed = any(r.cap_limited for r in self.window)
        self.window = []
        p = self.params
        if latency > p["target_ms"]:
            cut = max(int(p["min_cap"]), math.floor(self.current * p["decrease"]))
            self.decreases += cut < self.current
            self.current = cut
        elif pressed and self.current < p["max_cap"]:
            grown = self.current * 2 if p["slow_start"] and not self.decreases else self.current + int(p["step"])
            self.current = min(int(p["max_cap"]), grown)
            self.increases += 1
        self.low, self.high = min(self.low, self.current), max(self.high, self.current)

    def state(self) -> dict[str, int | float | str]:
        return super().state() | {"cap_final": self.current, "cap_min": self.low, "cap_max": self.high,
                                  "increases": self.increases, "decreases": self.decreases,
                                  "target_ms": float(self.params["target_ms"])}
