"""Raw per-request timestamps of one run: what a backend returns, before any metric.

Every time is in seconds on the ``time.perf_counter`` clock, relative to the
start of the measured run (``RunTrace.start`` is 0.0 by construction), read
after a device synchronisation. Metrics are derived from these numbers by the
pure functions in :mod:`batchperf.measure.metrics`; nothing here is an average.
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class RequestTrace:
    """One request's life: released, sent, admitted, every token in its chunks, and the KV it held.

    A *chunk* is what reached the client at once: one streamed message of a
    server, one engine step's tokens of one request. Every token of a chunk
    has the chunk's time. ``chunk_sizes`` (tokens per chunk, in order) is None
    in traces written before chunks were recorded: one chunk per token.
    """

    request_id: int
    prompt_len: int
    target_len: int
    arrival: float  # s: when the client released it (its offset passed and a concurrency slot was free)
    scheduled: float  # s: when the backend first admitted it to a batch
    token_times: tuple[float, ...]  # s: when each output token was available
    kv_tokens: int | None = None  # tokens whose K/V the backend held at peak
    kv_bytes: int | None = None  # bytes of K/V the backend held at peak for it
    error: str | None = None
    sent: float | None = None  # s: when it was actually sent (vLLM's start_time); None in older traces
    chunk_sizes: tuple[int, ...] | None = None  # tokens per chunk, summing to output_len
    tenant: str | None = None  # the workload's tenant of this request (None: no tenants)
    priority: int = 0  # the workload's priority (lower is served first, as vLLM's)
    due: float | None = None  # s: when the workload scheduled its send (open loop); None: closed loop

    def __post_init__(self) -> None:
        if self.chunk_sizes is not None and (
                sum(self.chunk_sizes) != len(self.token_times) or min(self.chunk_sizes, default=1) < 1):
            raise ValueError(f"request {self.request_id}: chunk_sizes {list(self.chunk_sizes)} must be >= 1 each "
                             f"and sum to its {len(self.token_times)} tokens")

    @property
    def output_len(self) -> int:
        return len(self.token_times)

    @property
    def start(self) -> float:
        """When latency counts from: the send (the arrival in traces older than ``sent``)."""
        return self.arrival if self.sent is None else self.sent

    @property
    def send_delay(self) -> float:
        """The client's own delay: released (arrival) to actually sent."""
        return self.start - self.arrival

    @property
    def chunk_times(self) -> tuple[float, ...]:
        """When each chunk arrived (s): the time of its last token."""
        if self.chunk_sizes is None:
            return self.token_times
        ends = itertools.accumulate(self.chunk_sizes)
        return tuple(self.token_times[end - 1] for end in ends)

    @property
    def ttft(self) -> float:
        return self.token_times[0] - self.start

    @property
    def e2el(self) -> float:
        return self.token_times[-1] - self.start

    @property
    def finished(self) -> float:
        return self.token_times[-1] if self.token_times else self.scheduled


@dataclass(slots=True)
class RunTrace:
    """Everything one run of a workload through a backend produced."""

    backend: str
    batch_size: int
    concurrency: int
    requests: list[RequestTrace]
    end: float  # s: when the last measured request finished
    start: float = 0.0
    warmup_excluded: int = 0  # warm-up requests run before ``start``, not in ``requests``
    kv: dict[str, Any] = field(default_factory=dict)  # backend KV figures (pool, block size…)
    telemetry: dict[str, Any] = field(default_factory=dict)  # batchperf.telemetry.sampler.Sampler.summary() of the run
    counters: dict[str, Any] = field(default_factory=dict)  # engine counters of the run (batchperf.measure.counters)
    client: dict[str, Any] = field(default_factory=dict)  # a server cell's client-lag check (measure.client_lag)
    # the batching policy the backend ran and what it did (its state(): caps, decreases, preemptions asked for)
    policy: dict[str, Any] = field(default_factory=dict)

    @property
    def duration(self) -> float:
        return self.end - self.start

    @property
    def arrival_rate(self) -> float | None:
        """Requests released per second over the arrival span, first release to last (the drain after the last is
        excluded: it measures the engine, not the load offered): (n - 1) / span; None with fewer than two requests
        or all released at once."""
        arrivals = [r.arrival for r in self.requests]
        span = max(arrivals, default=0.0) - min(arrivals, default=0.0)
        return (len(arrivals) - 1) / span if len(arrivals) >= 2 and span > 0 else None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for req in data["requests"]:
            req["token_times"] = list(req["token_times"])
            if req["chunk_sizes"] is not None:
                req["chunk_sizes"] = list(req["chunk_sizes"])
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunTrace:
        try:
            requests = [
                RequestTrace(**{**r, "token_times": tuple(r["token_times"]),
                                "chunk_sizes": None if r.get("chunk_sizes") is None else tuple(r["chunk_sizes"])})
                for r in data["requests"]
            ]
            return cls(**{**data, "requests": requests})
        except (KeyError, TypeError) as exc:
            raise ValueError(f"not a batchperf run trace: {exc}") from exc
