"""Raw per-request timestamps of one run: what a backend returns, before any metric.

Every time is in seconds on the ``time.perf_counter`` clock, relative to the
start of the measured run (``RunTrace.start`` is 0.0 by construction), read
after a device synchronisation. Metrics are derived from these numbers by the
pure functions in :mod:`batchperf.measure.metrics`; nothing here is an average.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class RequestTrace:
    """One request's life: sent, admitted, every token, and the KV it held."""

    request_id: int
    prompt_len: int
    target_len: int
    arrival: float  # s: when the client sent it (after the concurrency gate)
    scheduled: float  # s: when the backend first admitted it to a batch
    token_times: tuple[float, ...]  # s: when each output token was available
    kv_tokens: int | None = None  # tokens whose K/V the backend held at peak
    kv_bytes: int | None = None  # bytes of K/V the backend held at peak for it
    error: str | None = None

    @property
    def output_len(self) -> int:
        return len(self.token_times)

    @property
    def ttft(self) -> float:
        return self.token_times[0] - self.arrival

    @property
    def e2el(self) -> float:
        return self.token_times[-1] - self.arrival

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
    telemetry: dict[str, Any] = field(default_factory=dict)  # batchperf.measure.telemetry.Sampler.summary() of the run
    counters: dict[str, Any] = field(default_factory=dict)  # engine counters of the run (batchperf.measure.counters)

    @property
    def duration(self) -> float:
        return self.end - self.start

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for req in data["requests"]:
            req["token_times"] = list(req["token_times"])
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunTrace:
        try:
            requests = [
                RequestTrace(**{**r, "token_times": tuple(r["token_times"])})
                for r in data["requests"]
            ]
            return cls(**{**data, "requests": requests})
        except (KeyError, TypeError) as exc:
            raise ValueError(f"not a batchperf run trace: {exc}") from exc
