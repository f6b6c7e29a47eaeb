"""Seeded synthetic workloads: token-id prompts of exact length, targets, arrivals.

A workload is pure data, built the same on every machine for the same spec and
seed (numpy's PCG64). Prompts are token ids, so no tokenizer changes a length.
Warm-up requests are part of the spec; :func:`batchperf.backends.cell_run.run_cell` runs
them first and no metric ever sees them.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal

import numpy as np

if TYPE_CHECKING:
    from batchperf.measure.metrics import SLO

PROMPT_CLASSES: dict[str, int] = {"short": 128, "medium": 512, "long": 2048}
DEFAULT_OUTPUT_LENS: tuple[int, ...] = (16, 32)  # alternating, as in the study
# A cell's time limit for sending: a schedule whose last request is due later is refused before the cell starts
# (a rate of 1e-9 req/s would otherwise wait ~21 years in silence, and 1e300 s overflows the sender's sleep).
MAX_SCHEDULE_S = 24 * 3600.0


@dataclass(frozen=True, slots=True)
class LengthSpec:
    """Prompt lengths: one fixed value, a class name, or a mix.

    A mix is drawn uniformly per request, from ``choices`` when given, else
    from the inclusive range ``[low, high]``.
    """

    low: int
    high: int
    choices: tuple[int, ...] = ()
    text: str = ""

    def __post_init__(self) -> None:
        for value in (self.low, self.high, *self.choices):
            if value < 1:
                raise ValueError(f"prompt length must be >= 1 token, got {value} in {self.label!r}")
        if self.low > self.high:
            raise ValueError(f"prompt length range {self.low}-{self.high} is empty: low > high")

    @classmethod
    def parse(cls, text: str | int) -> LengthSpec:
        """Parse ``512``, ``short``/``medium``/``long``, ``64-512`` or ``64,256,512``."""
        raw = str(text).strip().lower()
        try:
            if raw in PROMPT_CLASSES:
                n = PROMPT_CLASSES[raw]
                return cls(n, n, text=raw)
            if "," in raw:
                values = tuple(int(v) for v in raw.split(",") if v.strip())
                return cls(min(values), max(values), choices=values, text=raw)
            if m := re.fullmatch(r"(\d+)\s*-\s*(\d+)", raw):
                return cls(int(m[1]), int(m[2]), text=raw)
            n = int(raw)
        except ValueError as exc:
            if "prompt length" in str(exc):
                raise
            raise ValueError(
                f"bad prompt length {text!r}: use a number (512), a class "
                f"({'/'.join(PROMPT_CLASSES)}), a range (64-512) or a list (64,256,512)"
            ) from None
        return cls(n, n, text=raw)

    @property
    def is_fixed(self) -> bool:
        return self.low == self.high

    @property
    def label(self) -> str:
        """Short form for test ids: ``512``, ``mix64-512``."""
        if self.is_fixed:
            return str(self.low)
        return "mix" + (self.text.replace(",", "_") if self.choices else f"{self.low}-{self.high}")

    def draw(self, rng: np.random.Generator, n: int) -> list[int]:
        if self.is_fixed:
            return [self.low] * n
        if self.choices:
            return [int(v) for v in rng.choice(self.choices, size=n)]
        return [int(v) for v in rng.integers(self.low, self.high + 1, size=n)]


@dataclass(frozen=True, slots=True)
class Arrival:
    """When requests are sent.

    ``closed``: all queued at t0, at most ``concurrency`` in flight, a new one
    sent as each finishes (``vllm bench serve --max-concurrency``).
    ``burst``: every request sent at t0, no in-flight limit.
    ``rate``: open loop, gamma-distributed gaps with mean ``1/rate``;
    ``burstiness`` 1 is Poisson (``vllm bench serve --request-rate``); the
    concurrency limit still applies.
    """

    kind: Literal["closed", "burst", "rate"] = "closed"
    rate: float = math.inf  # requests/s, for "rate"
    burstiness: float = 1.0

    def __post_init__(self) -> None:
        if self.kind not in ("closed", "burst", "rate"):
            raise ValueError(f"arrival kind must be closed, burst or rate, got {self.kind!r}")
        if self.kind == "rate" and not (self.rate > 0 and math.isfinite(self.rate)):
            raise ValueError(f"arrival rate must be a finite number > 0 req/s, got {self.rate}")
        if not (self.burstiness > 0 and math.isfinite(self.burstiness)):  # NaN gaps would never be sent
            raise ValueError(f"burstiness must be a finite number > 0, got {self.burstiness}")
        if self.kind == "rate" and not self.rate * self.burstiness > 0:  # the gaps' scale 1/(rate x shape) divides by 0
            raise ValueError(f"arrival rate {self.rate:g} req/s with burstiness {self.burstiness:g} gives gaps too long "
                             f"for a float; a schedule must fit a cell's time limit of {MAX_SCHEDULE_S:g} s")

    def offsets(self, rng: np.random.Generator, n: int) -> list[float]:
        """Scheduled send time of each request, seconds after t0."""
        if self.kind != "rate":
            return [0.0] * n
        theta = 1.0 / (self.rate * self.burstiness)
        gaps = rng.gamma(shape=self.burstiness, scale=theta, size=max(n - 1, 0))
        return [0.0, *np.cumsum(gaps).tolist()][:n]

    def max_in_flight(self, concurrency: int, n: int) -> int:
        return max(n, 1) if self.kind == "burst" else concurrency


@dataclass(frozen=True, slots=True)
class RequestSpec:
    request_id: int
    prompt_ids: tuple[int, ...]
    target_len: int  # output tokens to generate, exactly
    offset: float = 0.0  # s after t0 at which the client wants to send it
    tenant: str | None = None  # who sent it (tenant workloads and traces); None: no tenants
    priority: int = 0  # lower is served first, as vLLM's per-request priority

    @property
    def prompt_len(self) -> int:
        return len(self.prompt_ids)


@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    """What to generate. ``build`` turns it into concrete requests for a model."""

    num_prompts: int
    prompt_len: LengthSpec
    output_lens: tuple[int, ...] = DEFAULT_OUTPUT_LENS
    arrival: Arrival = Arrival()
    num_warmup: int = 0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.num_prompts < 1:
            raise ValueError(f"num_prompts must be >= 1 (an empty workload measures nothing), got {self.num_prompts}")
        if self.num_warmup < 0:
            raise ValueError(f"num_warmup must be >= 0, got {self.num_warmup}")
        if not self.output_lens or min(self.output_lens) < 1:
            raise ValueError(f"output_lens must be non-empty and each >= 1 token, got {self.output_lens}")

    @staticmethod
    def default_warmup(num_prompts: int) -> int:
        """The study's rule: the first 5% of requests are warm-up."""
        return math.ceil(0.05 * num_prompts)

    def build(self, vocab_size: int, max_model_len: int, first_token_id: int = 0) -> Workload:
        """Concrete requests with token ids in ``[first_token_id, vocab_size)``."""
        if vocab_size - first_token_id < 2:
            raise ValueError(f"vocabulary range [{first_token_id}, {vocab_size}) is too small for prompts")
        longest = self.prompt_len.high + max(self.output_lens)
        if longest > max_model_len:
            raise ValueError(
                f"prompt of {self.prompt_len.high} + {max(self.output_lens)} output tokens = {longest} "
                f"exceeds the model's context of {max_model_len} tokens; use shorter prompts"
            )
        rng = np.random.Generator(np.random.PCG64(self.seed))
        total = self.num_warmup + self.num_prompts
        lengths = self.prompt_len.draw(rng, total)
        seen: set[tuple[int, ...]] = set()
        prompts: list[tuple[int, ...]] = []
        for length in lengths:
            prompt = tuple(int(t) for t in rng.integers(first_token_id, vocab_size, size=length))
            while prompt in seen:  # distinct prompts, so no cache can share one
                prompt = tuple(int(t) for t in rng.integers(first_token_id, vocab_size, size=length))
            seen.add(prompt)
            prompts.append(prompt)
        cycle = self.output_lens
        warm = [RequestSpec(-(i + 1), prompts[i], cycle[i % len(cycle)]) for i in range(self.num_warmup)]
        measured_offsets = self.arrival.offsets(rng, self.num_prompts)
        measured = [
            RequestSpec(i, prompts[self.num_warmup + i], cycle[i % len(cycle)], measured_offsets[i])
            for i in range(self.num_prompts)
        ]
        return Workload(spec=self, requests=tuple(measured), warmup=tuple(warm))


@dataclass(frozen=True, slots=True)
class Workload:
    """Concrete requests, and what the metrics need to know of the traffic (:mod:`batchperf.workload.traffic`)."""

    spec: WorkloadSpec
    requests: tuple[RequestSpec, ...]
    warmup: tuple[RequestSpec, ...] = ()
    kind: str = "synthetic"  # synthetic, prefix, trace, tenants
    label: str = "synthetic"  # short text for cell ids and reports
    load: float = 1.0  # the offered-load factor it was built with (--batchperf-load)
    slos: dict[str, SLO] = field(default_factory=dict)  # tenant -> SLO ("": no tenants); {}: no SLO
    expected_prefix_hit_rate: float | None = None  # prompt tokens a prefix cache can serve / prompt tokens
    file_hash: str | None = None  # of the file it was read from (trace, tenants)
    unlimited: bool = False  # sent at the offsets whatever the concurrency (a trace, tenants): no in-flight limit
    priorities: bool | None = None  # some request has a priority other than 0 (None: look at the requests)

    def __post_init__(self) -> None:
        last = max((r.offset for r in self.requests), default=0.0)
        if not last <= MAX_SCHEDULE_S:  # NaN too
            raise ValueError(f"workload {self.label} (load {self.load:g}): its schedule is {schedule_length(last)} "
                             f"long, beyond a cell's time limit of {MAX_SCHEDULE_S / 3600:g} h; raise the load, "
                             f"speed or rate, or cut a trace with window=A-B")

    @property
    def uses_priority(self) -> bool:
        """Some measured request has a priority other than 0: the backend runs its priority policy (its warm-up
        too, so that the warm-up warms the engine or server the measured requests run on)."""
        return self.priorities if self.priorities is not None else any(r.priority != 0 for r in self.requests)

    @property
    def open_loop(self) -> bool:
        """Requests are due at their offsets (RequestTrace.due), not sent as others finish."""
        return self.unlimited or self.spec.arrival.kind == "rate"

    def max_in_flight(self, concurrency: int) -> int:
        if self.unlimited:
            return max(len(self.requests), 1)
        return self.spec.arrival.max_in_flight(concurrency, len(self.requests))

    def warmup_only(self) -> Workload:
        """The warm-up requests as a workload of their own (sent closed-loop)."""
        return replace(self, requests=self.warmup, warmup=(), priorities=self.uses_priority)


def schedule_length(seconds: float) -> str:
    """``seconds`` in words a reader can weigh: ``3.2 s``, ``7.5 h``, ``21 years``."""
    if not math.isfinite(seconds):
        return "unbounded (more seconds than a float holds)"
    for unit, size in (("years", 365.25 * 86400), ("days", 86400), ("h", 3600)):
        if seconds >= size:
            return f"{seconds / size:.3g} {unit}"
    return f"{seconds:.3g} s"
