"""``fair``: a virtual token counter per tenant (VTC), and optional per-tenant caps.

The Virtual Token Counter of Sheng et al., "Fairness in Serving Large Language Models" (OSDI 2024):

- each tenant's counter is the weighted service it has received, divided by its share weight
  (``TenantTargets.weight``, default 1): ``w_in`` per prompt token, charged when a request is first admitted,
  and ``w_out`` per output token, charged when it is generated (VTC's weights 1 and 2, as
  ``batchperf.measure.slo`` measures service); recomputing a preempted request is not charged again;
- admission: from the backlogged tenants (with a request waiting) under their cap, the one with the smallest
  counter, its first waiting request; if that one does not fit the free KV blocks, nobody overtakes it;
- a tenant that becomes backlogged has its counter lifted to the smallest counter of the backlogged tenants
  (or, when none is, to the counter of the tenant that last stopped being backlogged), so service it did not
  ask for is not owed to it;
- when KV blocks run out, the newest running request of the tenant with the largest counter is preempted.

Between two tenants that stay backlogged, the counters then differ by at most a prompt's charge plus the output
the running requests of one tenant can still generate (VTC's bound; tests/engine/policies/test_fair.py checks
it). ``tenant_cap`` (default: none, only the running cap) bounds each tenant's running requests; a tenant at its
cap is passed over, which is where VTC's bound stops holding.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

from batchperf.engine.policies.base import Param, Policy, PolicyContext, StepReport
from batchperf.engine.request import Request

MAX_CHARGE = 1e6  # counter charge per token, at most


class Fair(Policy):
    name = "fair"
    PARAMS = {
        "tenant_cap": Param(int, None, "most running requests per tenant; None: only the running cap", low=1),
        "w_in": Param(float, 1.0, "counter charge per prompt token", low_open=True),
        "w_out": Param(float, 2.0, "counter charge per output token", low_open=True),
    }

    @classmethod
    def check_together(cls, params: Mapping[str, int | float | None]) -> None:
        for name in ("w_in", "w_out"):
            value = params.get(name)
            if value is not None and value > MAX_CHARGE:  # 1e308 a token made the counters Infinity in the results
                raise ValueError(f"fair: {name} must be at most {MAX_CHARGE:g} (a charge per token that keeps every "
                                 f"counter far within a float over any cell), got {value!r}")

    def __init__(self, ctx: PolicyContext, **params: int | float | None) -> None:
        super().__init__(ctx, **params)
        self.counters: dict[str, float] = defaultdict(float)
        self.charged: dict[int, int] = {}  # request id -> output tokens already charged
        self.last_left = 0.0  # the counter of the tenant that last stopped being backlogged
        self.lifts = 0

    def _weight(self, tenant: str) -> float:
        targets = self.ctx.tenants.get(tenant)
        return targets.weight if targets is not None else 1.0

    def arrive(self, request: Request, waiting: Sequence[Request]) -> None:
        backlogged = {r.tenant for r in waiting}
        if request.tenant in backlogged:
            return
        floor = min((self.counters[t] for t in backlogged), default=self.last_left)
        if floor > self.counters[request.tenant]:
            self.counters[request.tenant] = floor
            self.lifts += 1

    def select(self, waiting: Sequence[Request], running: Sequence[Request]) -> Request | None:
        cap = self.params["tenant_cap"]
        busy: dict[str, int] = defaultdict(int)
        for r in running:
            busy[r.tenant] += 1
        first: dict[str, Request] = {}
        for r in waiting:
            if r.tenant not in first and (cap is None or busy[r.tenant] < cap):
                first[r.tenant] = r
        if not first:
            return None
        return min(first.values(), key=lambda r: self.counters[r.tenant])  # ties: the earliest in the queue

    def admitted(self, request: Request, waiting: Sequence[Request]) -> None:
        if request.request_id not in self.charged:
            self.charged[request.request_id] = request.num_generated
            self.counters[request.tenant] += self.params["w_in"] * request.prompt_len / self._weight(request.tenant)
        if not any(r.tenant == request.tenant for r in waiting):
            self.last_left = self.counters[request.tenant]

    def victim(self, candidates: Sequence[Request]) -> Request:
        most = max(self.counters[r.tenant] for r in candidates)
        return [r for r in candidates if self.counters[r.tenant] == most][-1]

    def observe(self, report: StepReport) -> None:
        for request in report.requests:
            done = self.charged.get(request.request_id)
            if done is None:
                continue
            self.counters[request.tenant] += self.params["w_out"] * (request.num_generated - done) / self._weight(
                request.tenant)
            self.charged[request.request_id] = request.num_generated
        for request in report.finished:
            self.charged.pop(request.request_id, None)

    def state(self) -> dict[str, int | float | str]:
        return super().state() | {"lifts": self.lifts} | {f"counter_{t or '-'}": c for t, c in
                                                           sorted(self.counters.items())}
