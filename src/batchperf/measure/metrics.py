"""Pure functions from a :class:`RunTrace` to numbers, named and defined as ``vllm bench serve`` does.

- ``duration``: the run's start (before the first request is sent) to the last request finished (s).
- ``ttft``: first token time − the moment the request was sent (vLLM's ``start_time``).
- ``tpot``: (E2E − TTFT) / (n − 1), per request with n > 1 output tokens.
- ``itl``: the gap between consecutive *chunks* (what reached the client at once), pooled over requests:
  one sample per chunk after the first, as vLLM's client appends one per streamed message. A chunk of
  k tokens is one sample, not k − 1 zero gaps; TPOT still divides by tokens.
- ``e2el``: last token time − sent.
- ``send_delay`` (batchperf's own, no vLLM counterpart): released by the client (its concurrency slot
  free) − sent: the client's own time to send, which TTFT no longer contains. vLLM's
  ``client_queue_time`` also counts the wait for the slot.
- Percentiles: numpy's linear interpolation; ``std``: population std (numpy default).
- Throughputs divide by ``duration``; output tokens are the tokens actually produced.
- Goodput: requests meeting every given SLO (ms), per second.
- ``send_lag`` (batchperf's own, open-loop runs only): sent − due, the request's scheduled send time
  (``RequestTrace.due``): how late the client sent it. A trace replay should keep its P99 within a few ms.

Each percentile family also reports its sample count (``n_ttft``, ``n_itl``, …),
since a P99 over 16 samples is only the maximum.
"""

from __future__ import annotations

import itertools
import statistics
from dataclasses import dataclass, fields

import numpy as np

from batchperf.measure.trace import RequestTrace, RunTrace

PERCENTILES: tuple[int, ...] = (50, 90, 99)
# the latency families vLLM reports (and the per-tenant ones); send_delay and send_lag are batchperf's own
LATENCY_FAMILIES: tuple[str, ...] = ("ttft", "tpot", "itl", "e2el")


@dataclass(frozen=True, slots=True)
class SLO:
    """Service-level objectives in milliseconds; ``None`` means not constrained."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2el_ms: float | None = None

    def met_by(self, request: RequestTrace) -> bool:
        # compared in seconds, as vLLM's goodput does (SLO / 1000 >= value), so a value at the bound agrees
        if self.ttft_ms is not None and request.ttft > self.ttft_ms / 1e3:
            return False
        if self.tpot_ms is not None and request.output_len > 1 and _tpot(request) > self.tpot_ms / 1e3:
            return False
        return self.e2el_ms is None or request.e2el <= self.e2el_ms / 1e3

    @property
    def any(self) -> bool:
        return any(getattr(self, name) is not None for name in SLO_FIELDS)


# the SLO's fields, the keys an slo table (a tenant's, a workload's) may have
SLO_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(SLO))


def _tpot(request: RequestTrace) -> float:
    return (request.e2el - request.ttft) / (request.output_len - 1)


def _summary(name: str, samples_s: list[float]) -> dict[str, float]:
    """mean/median/std/pNN in ms, with the sample count; zeros when there are no samples (as vLLM)."""
    values = np.asarray(samples_s or [0.0], dtype=np.float64) * 1e3
    out = {
        f"mean_{name}_ms": float(np.mean(values)),
        f"median_{name}_ms": float(np.median(values)),
        f"std_{name}_ms": float(np.std(values)),
    }
    for p in PERCENTILES:
        out[f"p{p}_{name}_ms"] = float(np.percentile(values, p))
    out[f"n_{name}"] = len(samples_s)
    return out


def completed(trace: RunTrace) -> list[RequestTrace]:
    """The requests that count: no error and at least one token."""
    return [r for r in trace.requests if r.error is None and r.output_len > 0]


def itl_samples(trace: RunTrace) -> list[float]:
    """Inter-token latencies (s): every gap between consecutive chunks of every completed request, pooled."""
    return [b - a for r in completed(trace) for a, b in itertools.pairwise(r.chunk_times)]


def compute_metrics(trace: RunTrace, slo: SLO | None = None) -> dict[str, float]:
    """Every metric of one run. Failed requests (``error`` set or no token) are not ``completed``."""
    ok = completed(trace)
    duration = trace.duration
    if duration <= 0:
        raise ValueError(f"run duration must be > 0 s, got {duration}")
    output_tokens = sum(r.output_len for r in ok)
    input_tokens = sum(r.prompt_len for r in ok)
    metrics: dict[str, float] = {
        "duration": duration,
        "completed": len(ok),
        "failed": len(trace.requests) - len(ok),
        "total_input_tokens": input_tokens,
        "total_output_tokens": output_tokens,
        "request_throughput": len(ok) / duration,
        "output_throughput": output_tokens / duration,
        "total_token_throughput": (input_tokens + output_tokens) / duration,
    }
    metrics |= _summary("ttft", [r.ttft for r in ok])
    metrics |= _summary("tpot", [_tpot(r) for r in ok if r.output_len > 1])
    metrics |= _summary("itl", itl_samples(trace))
    metrics |= _summary("e2el", [r.e2el for r in ok])
    metrics |= _summary("send_delay", [r.send_delay for r in ok])
    if any(r.due is not None for r in ok):  # open loop: how late each request went out
        metrics |= _summary("send_lag", [max(r.start - r.due, 0.0) for r in ok if r.due is not None])
    if slo is not None and slo.any:
        metrics["request_goodput"] = sum(slo.met_by(r) for r in ok) / duration
    return metrics


def token_count_errors(trace: RunTrace) -> list[str]:
    """One line per request that did not produce exactly its target number of tokens."""
    return [
        f"request {r.request_id}: generated {r.output_len} tokens, target {r.target_len}"
        + (f" ({r.error})" if r.error else "")
        for r in trace.requests
        if r.output_len != r.target_len or r.error
    ]


def summarise(rounds: list[dict[str, float]]) -> dict[str, float]:
    """Median over rounds of every metric (sample counts ``n_*`` come from the last round)."""
    keys = rounds[-1].keys()
    return {k: (rounds[-1][k] if k.startswith("n_") else statistics.median(r[k] for r in rounds)) for k in keys}
