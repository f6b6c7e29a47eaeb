"""``seed``: the study's adaptive batching rule, exactly as written.

    if more than THRESHOLD_HIGH requests wait, run min(MAX_BATCH, pending);
    if latency exceeds the SLA, drop to batch 1;
    else run OPTIMAL_BATCH.

Read literally, in that order, every step, as the running cap:

- "requests wait": the scheduler's queue (not yet admitted); "pending": every request not finished, the
  waiting and the running ones (the study's static batcher had nothing running when it formed a batch, so
  everything pending went into it);
- "latency": the mean measured duration of the last ``window`` steps (ms), i.e. the inter-token time each
  running request saw, compared with ``sla_ms``; before any step has run, it has not exceeded the SLA;
- "run N": the running cap is N; when it falls below the requests already running, the oldest N run and the
  others keep their KV blocks and wait for a step with room (nothing is recomputed).

Under a burst the queue passes THRESHOLD_HIGH and the batch jumps to MAX_BATCH; once the queue drains below it
while steps are still slow, the rule drops to batch 1. That is what the suite measures.

Defaults: the study gives the rule and the names, not values we can quote, so these are batchperf's:
``threshold_high=8``, ``optimal_batch=4`` (or ``max_batch`` when that is smaller), ``max_batch`` = the cell's
batch size, ``sla_ms`` = the context's per-step target (the tightest tenant TPOT, or half the tightest TTFT:
``PolicyContext.step_target_ms``), ``window=4`` steps. Without any such SLO, ``sla_ms`` must be given.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence

from batchperf.engine.policies.base import Param, Policy, PolicyContext, StepReport
from batchperf.engine.request import Request


class Seed(Policy):
    name = "seed"
    PARAMS = {
        "threshold_high": Param(int, 8, "more waiting requests than this run the big batch", low=0),
        "max_batch": Param(int, None, "the big batch; None: the cell's batch size", low=1),
        "optimal_batch": Param(int, 4, "the batch when neither rule fires", low=1),
        "sla_ms": Param(float, None, "the latency bound, ms; None: the tightest TPOT or TTFT/2", low_open=True),
        "window": Param(int, 4, "steps whose mean duration is the latency", low=1),
    }

    @classmethod
    def check_together(cls, params: Mapping[str, int | float | None]) -> None:
        big, optimal = params.get("max_batch"), params.get("optimal_batch")
        if big is not None and optimal is not None and optimal > big:
            raise ValueError(f"seed: optimal_batch ({optimal}) must be <= max_batch ({big})")

    def __init__(self, ctx: PolicyContext, **params: int | float | None) -> None:
        params = {"max_batch": ctx.batch_size, "sla_ms": ctx.step_target_ms()} | params
        default = self.PARAMS["optimal_batch"].default
        params.setdefault("optimal_batch", min(default, params["max_batch"]))  # a cell smaller than the default
        if params["sla_ms"] is None:
            raise ValueError("seed: no sla_ms and no tenant TPOT or TTFT SLO to derive it from; "
                             "give seed:sla_ms=... or a workload with SLOs")
        super().__init__(ctx, **params)
        self.durations: deque[float] = deque(maxlen=int(self.params["window"]))
        self.branches = {"queue": 0, "sla": 0, "optimal": 0}  # steps each rule decided

    @property
    def latency_ms(self) -> float | None:
        return sum(self.durations) / len(self.durations) if self.durations else None

    def cap(self, waiting: Sequence[Request], running: Sequence[Request]) -> int:
        p = self.params
        latency = self.latency_ms
        if len(waiting) > p["threshold_high"]:
            self.branches["queue"] += 1
            return int(min(p["max_batch"], len(waiting) + len(running)))
        if latency is not None and latency > p["sla_ms"]:
            self.branches["sla"] += 1
            return 1
        self.branches["optimal"] += 1
        return int(p["optimal_batch"])

    def observe(self, report: StepReport) -> None:
        self.durations.append(report.duration_ms)

    def state(self) -> dict[str, int | float | str]:
        return super().state() | {f"steps_{k}": v for k, v in self.branches.items()}
