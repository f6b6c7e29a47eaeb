"""SLO attainment, goodput, per-tenant latencies and fairness between tenants: pure functions of a RunTrace.

Definitions (docs/traffic.md):

- A request *meets its SLOs* when it completed (no error, every one of its target tokens generated) and its
  tenant's :class:`~batchperf.measure.metrics.SLO` holds (TTFT, TPOT, E2EL, compared as vLLM's goodput does).
  A tenant without SLOs: completing is meeting.
- **Attainment** = requests meeting their SLOs ÷ requests *offered*: a failed, errored, cut-off (fewer tokens
  than its target) or never-returned request is a miss, so shedding load never raises the score
  (DistServe's and Sarathi-Serve's SLO attainment).
- **Goodput** = requests meeting their SLOs per second of the run (vLLM's ``request_goodput``).
- **Service** of a tenant: VTC's weighted tokens (Sheng et al., "Fairness in Serving Large Language Models",
  OSDI 2024), ``w_in`` × prompt tokens, counted when the request's first token arrives (its prefill is done),
  plus ``w_out`` × each output token when it arrives; VTC's weights ``w_in = 1``, ``w_out = 2``.
- A tenant is *backlogged* at time t while one of its requests has been sent and has not finished.
- **Jain's index** of normalised service: x = a tenant's service ÷ the time it was backlogged (the rate it was
  served at while it wanted service); J = (Σx)² / (n Σx²), in [1/n, 1], 1 when every tenant was served at the
  same rate. Tenants never backlogged are left out; one tenant gives 1.
- A tenant is *overtaken* over a window in which it was backlogged the whole time and received no token while
  another tenant received tokens of a request sent after the window began (a later arrival was served first).
  ``longest_unserved_s`` is its longest such window. It is *starved* when that window lasts at least
  ``STARVATION_MIN_S`` and ``STARVATION_SHARE`` of the run: denied all service for a large part of the run while
  later arrivals were served. A queue served in arrival order starves nobody, however long it is; a starved
  tenant fails its cell (never a pass), whatever its attainment.
- **Largest service gap**: for each pair of tenants, over each interval in which both were backlogged, the
  largest |ΔW_f − ΔW_g| over its sub-intervals (VTC's fairness bound, measured), in weighted tokens; 0 with
  fewer than two tenants or no interval where two were backlogged.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace

import numpy as np

from batchperf.measure.metrics import LATENCY_FAMILIES, SLO, compute_metrics, summarise
from batchperf.measure.trace import RequestTrace, RunTrace

W_IN, W_OUT = 1.0, 2.0  # VTC's token weights: a prompt token, an output token
# starved (issue 27): overtaken for at least this long and this share of the run
STARVATION_MIN_S = 5.0
STARVATION_SHARE = 0.5
NO_TENANT = ""  # the tenant key of requests that have none (the workload has no tenants)
# the per-tenant latency statistics stored (vLLM's names, from compute_metrics on the tenant's requests)
TENANT_STATS = ("mean", "median", "p90", "p99")


def tenant_of(request: RequestTrace) -> str:
    return NO_TENANT if request.tenant is None else request.tenant


def meets(request: RequestTrace, slo: SLO | None) -> bool:
    """Completed in full (no error, every target token) and within ``slo`` (None: no SLO, completing is meeting)."""
    if request.error is not None or request.output_len == 0 or request.output_len < request.target_len:
        return False
    return slo is None or slo.met_by(request)


@dataclass(frozen=True, slots=True)
class Attainment:
    offered: int
    met: int
    duration: float  # s

    @property
    def ratio(self) -> float:
        """met ÷ offered; 0 when nothing was offered (no request to attain)."""
        return self.met / self.offered if self.offered else 0.0

    @property
    def goodput(self) -> float:
        """Requests meeting their SLOs per second."""
        return self.met / self.duration


def tenants(trace: RunTrace) -> list[str]:
    return sorted({tenant_of(r) for r in trace.requests})


def attainment(trace: RunTrace, slos: Mapping[str, SLO], offered: Mapping[str, int] | None = None,
               tenant: str | None = None) -> Attainment:
    """Attainment of ``tenant``'s requests (None: all). ``slos`` maps a tenant to its SLO (a missing tenant: none);
    ``offered`` counts what the workload offered per tenant when some requests never made it into the trace."""
    if trace.duration <= 0:
        raise ValueError(f"run duration must be > 0 s, got {trace.duration}")
    mine = [r for r in trace.requests if tenant is None or tenant_of(r) == tenant]
    met = sum(meets(r, slos.get(tenant_of(r))) for r in mine)
    wanted = len(mine)
    if offered is not None:
        wanted = max(wanted, sum(n for t, n in offered.items() if tenant is None or t == tenant))
    return Attainment(wanted, met, trace.duration)


def tenant_metrics(trace: RunTrace, tenant: str) -> dict[str, float]:
    """vLLM's latency statistics over ``tenant``'s requests only (measure.metrics.compute_metrics, not a copy)."""
    sub = replace(trace, requests=[r for r in trace.requests if tenant_of(r) == tenant])
    full = compute_metrics(sub)
    keys = [f"{s}_{f}_ms" for f in LATENCY_FAMILIES for s in TENANT_STATS] + [f"n_{f}" for f in LATENCY_FAMILIES]
    return {k: full[k] for k in keys} | {"completed": full["completed"], "output_throughput": full["output_throughput"]}


# --- service and fairness ----------------------------------------------------------------------------------------


def service_events(request: RequestTrace) -> list[tuple[float, float]]:
    """(time s, weighted tokens) delivered to ``request``'s tenant: its prompt at the first token, each token."""
    if not request.token_times:
        return []
    return [(request.token_times[0], W_IN * request.prompt_len), *((t, W_OUT) for t in request.token_times)]


def service(trace: RunTrace) -> dict[str, float]:
    """Weighted tokens delivered per tenant over the run."""
    out = dict.fromkeys(tenants(trace), 0.0)
    for r in trace.requests:
        out[tenant_of(r)] += sum(w for _, w in service_events(r))
    return out


def _merge(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for a, b in sorted(i for i in intervals if i[1] > i[0]):
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged


def backlogged(trace: RunTrace) -> dict[str, list[tuple[float, float]]]:
    """Per tenant, the disjoint intervals (s) in which one of its requests was sent and not finished."""
    spans: dict[str, list[tuple[float, float]]] = {t: [] for t in tenants(trace)}
    for r in trace.requests:
        spans[tenant_of(r)].append((r.start, r.finished))
    return {t: _merge(s) for t, s in spans.items()}


def jain(values: list[float]) -> float:
    """Jain's fairness index (Σx)² / (n Σx²) of non-negative values: 1 when all equal, 1/n when one has it all;
    1 for no values or all zero (nobody was treated differently)."""
    if any(v < 0 for v in values):
        raise ValueError(f"Jain's index needs values >= 0, got {values}")
    top = max(values, default=0.0)
    if top == 0:
        return 1.0
    scaled = [v / top for v in values]  # in [0, 1]: tiny values squared would underflow into subnormals (index > 1)
    return sum(scaled) ** 2 / (len(scaled) * sum(v * v for v in scaled))


def jain_fairness(trace: RunTrace) -> float:
    """Jain's index of each tenant's service rate while backlogged."""
    delivered, spans = service(trace), backlogged(trace)
    rates = [delivered[t] / busy for t in delivered if (busy := sum(b - a for a, b in spans[t])) > 0]
    return jain(rates)


def _shared_spans(spans: Mapping[str, list[tuple[float, float]]]) -> Iterator[tuple[str, str, float, float]]:
    """(f, g, lo, hi) for every interval two tenants were both backlogged: a sweep over the intervals in start order
    that meets only the tenants backlogged at each start (the old walk over every pair of tenants was quadratic in
    them, whether or not they ever waited together)."""
    starts = sorted((a, b, t) for t, intervals in spans.items() for a, b in intervals)
    active: list[tuple[float, float, str]] = []  # intervals begun and not yet ended (a tenant's own are disjoint)
    for a, b, f in starts:
        active = [(a2, b2, g) for a2, b2, g in active if b2 > a]  # one that ended at a shares nothing from a on
        for _, b2, g in active:
            if a < (hi := min(b, b2)):
                yield f, g, a, hi
        active.append((a, b, f))


def max_service_gap(trace: RunTrace) -> float:
    """The largest service difference (weighted tokens) between two tenants over an interval both were backlogged.

    Per tenant its service events, once, as sorted times and the service delivered up to each (``W``); then, for
    each interval two tenants shared (:func:`_shared_spans`), ``D = W_f - W_g`` at its start and at each instant in
    it that served either: the largest ``|D(t2) - D(t1)|`` there is ``max D - min D``. The work is the events
    within shared intervals: linear in the tenants for a given number of them backlogged at once."""
    events: dict[str, list[tuple[float, float]]] = {t: [] for t in tenants(trace)}
    for r in trace.requests:
        events[tenant_of(r)] += service_events(r)
    times: dict[str, np.ndarray] = {}
    served: dict[str, np.ndarray] = {}  # served[t][i]: service up to and including times[t][i - 1]
    for t, mine in events.items():
        mine.sort()
        times[t] = np.array([at for at, _ in mine])
        served[t] = np.concatenate(([0.0], np.cumsum([w for _, w in mine])))
    worst = 0.0
    for f, g, lo, hi in _shared_spans(backlogged(trace)):
        # service at lo belongs to before the interval; at hi, inside it
        inside = [times[t][np.searchsorted(times[t], lo, side="right"):np.searchsorted(times[t], hi, side="right")]
                  for t in (f, g)]
        at = np.concatenate(([lo], *inside))
        d = (served[f][np.searchsorted(times[f], at, side="right")]
             - served[g][np.searchsorted(times[g], at, side="right")])
        worst = max(worst, float(d.max() - d.min()))
    return worst


def longest_unserved(trace: RunTrace) -> dict[str, float]:
    """Per tenant, its longest window (s) overtaken: backlogged, no token of its own, while another tenant got tokens
    of a request sent after the window began. A window runs from the start of a backlog (or the tenant's previous
    token) to its next token (or the backlog's end)."""
    own: dict[str, list[float]] = {t: [] for t in tenants(trace)}
    for r in trace.requests:
        own[tenant_of(r)] += list(r.token_times)
    spans = backlogged(trace)
    out = {}
    for tenant, mine in own.items():
        # the other tenants' tokens in time order, each with the send time of its request
        theirs = sorted((t, r.start) for r in trace.requests if tenant_of(r) != tenant for t in r.token_times)
        times = np.array([t for t, _ in theirs])
        sent = np.array([s for _, s in theirs])
        mine.sort()
        worst = 0.0
        for lo, hi in spans[tenant]:
            edges = [lo, *(t for t in mine if lo < t < hi), hi]
            for a, b in zip(edges, edges[1:]):
                i, j = np.searchsorted(times, a, side="right"), np.searchsorted(times, b, side="left")
                if j > i and sent[i:j].max() >= a:  # a later arrival was served while this tenant waited
                    worst = max(worst, b - a)
        out[tenant] = worst
    return out


def starvation_window(duration: float) -> float:
    """The overtaken time (s) that makes a tenant starved in a run of ``duration`` s."""
    return max(STARVATION_MIN_S, STARVATION_SHARE * duration)


def starved(unserved: Mapping[str, float], duration: float) -> list[str]:
    """The tenants overtaken for at least the starvation window of a run of ``duration`` s."""
    return sorted(t for t, s in unserved.items() if s >= starvation_window(duration))


# --- what a cell stores --------------------------------------------------------------------------------------------


def slo_summary(trace: RunTrace, slos: Mapping[str, SLO], offered: Mapping[str, int] | None = None
                ) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """One round's ``slo`` section (overall) and its ``tenants`` section (one block per tenant, keyed by name;
    ``""`` when the workload has no tenants)."""
    overall = attainment(trace, slos, offered)
    delivered = service(trace)
    names = sorted(set(delivered) | set(offered or {}))
    unserved = longest_unserved(trace)
    section = {"attainment": overall.ratio, "request_goodput": overall.goodput, "offered": overall.offered,
               "met": overall.met, "tenant_count": len(names), "jain_fairness": jain_fairness(trace),
               "max_service_gap_tokens": max_service_gap(trace),
               "starved_tenants": len(starved(unserved, trace.duration))}
    per_tenant: dict[str, dict[str, float]] = {}
    starving = set(starved(unserved, trace.duration))  # once, not once per tenant (quadratic in tenants)
    for name in names:
        mine = attainment(trace, slos, offered, name)
        block = {"attainment": mine.ratio, "request_goodput": mine.goodput, "offered": mine.offered,
                 "met": mine.met, "service_tokens": delivered.get(name, 0.0),
                 "longest_unserved_s": unserved.get(name, 0.0),
                 "starved": int(name in starving)}
        if name in delivered:
            block |= tenant_metrics(trace, name)
        per_tenant[name] = block
    return section, per_tenant


def summarise_tenants(rounds: list[dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Median over rounds of each tenant's numbers (measure.metrics.summarise per tenant)."""
    names = sorted({t for r in rounds for t in r})
    return {t: summarise([r[t] for r in rounds if t in r]) for t in names}
