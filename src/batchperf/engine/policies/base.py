"""What a batching policy is told and what it decides: the context, one step's report, and the base class.

Torch-free, like the scheduler that consults it. Every step
:class:`~batchperf.engine.scheduler.Scheduler` asks its policy for the running cap
(:meth:`Policy.cap`), the step's token budget (:meth:`Policy.budget`), which waiting
request to admit next (:meth:`Policy.select`), whom to preempt when KV blocks run out
(:meth:`Policy.victim`) and whom a waiting request may displace (:meth:`Policy.displaceable`);
after the forward pass it reports what ran and when (:meth:`Policy.observe`, a
:class:`StepReport` stamped with the engine's clock). The base class decides as the
scheduler did before policies existed; it is ``fcfs``.

One policy object serves one run: aimd, seed and fair keep state between steps, so build
a fresh one (``PolicySpec.build``) for every run.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from batchperf.engine.request import Request


def _positive_or_none(owner: str, name: str, value: float | None) -> None:
    if value is not None and not (math.isfinite(value) and value > 0):
        raise ValueError(f"{owner}: {name} must be a finite number > 0 ms or None, got {value!r}")


@dataclass(frozen=True, slots=True)
class TenantTargets:
    """One tenant's SLOs (ms; None: not constrained), its priority (lower is more urgent) and its share weight."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2el_ms: float | None = None
    priority: int = 0
    weight: float = 1.0

    def __post_init__(self) -> None:
        for name in ("ttft_ms", "tpot_ms", "e2el_ms"):
            _positive_or_none("TenantTargets", name, getattr(self, name))
        if not (math.isfinite(self.weight) and self.weight > 0):
            raise ValueError(f"TenantTargets: weight must be a finite number > 0, got {self.weight!r}")


@dataclass(frozen=True, slots=True)
class PolicyContext:
    """What a policy may know of its cell: the batch size (the static cap) and each tenant's targets.

    ``tenants`` maps a tenant to its targets; ``""`` holds requests without a tenant.
    """

    batch_size: int
    tenants: Mapping[str, TenantTargets] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise ValueError(f"PolicyContext: batch_size must be an integer >= 1, got {self.batch_size!r}")

    def step_target_ms(self) -> float | None:
        """The per-step latency target: the tightest tenant TPOT, and half the tightest TTFT, whichever is less.

        A step's duration is the inter-token time of every request it decodes, so TPOT bounds it directly. An
        arriving request waits for the step in progress and then runs its own prefill step, so its TTFT is at
        least two steps: a TTFT target allows steps of half of it. E2EL alone gives no per-step target (the
        output length is unknown): None.
        """
        bounds = [t.tpot_ms for t in self.tenants.values() if t.tpot_ms is not None]
        bounds += [t.ttft_ms / 2 for t in self.tenants.values() if t.ttft_ms is not None]
        return min(bounds) if bounds else None


@dataclass(frozen=True, slots=True)
class StepReport:
    """One engine step, told to the policy after its forward pass."""

    start: float  # s: the clock read before scheduling
    end: float  # s: the clock read after the forward pass (when the step's tokens exist)
    requests: tuple[Request, ...]  # scheduled this step, in step order
    num_tokens: int  # tokens the step ran (prompt chunks + one per decoding request)
    finished: tuple[Request, ...]  # left the engine after this step
    cap: int  # the running cap the policy gave for this step
    running: int  # requests running once the step was scheduled (including any paused above the cap)
    waiting: int  # requests left waiting once the step was scheduled

    @property
    def duration_ms(self) -> float:
        return (self.end - self.start) * 1e3

    @property
    def cap_limited(self) -> bool:
        """Requests waited while the running set was at the cap: a larger cap would have admitted more."""
        return self.waiting > 0 and self.running >= self.cap


@dataclass(frozen=True, slots=True)
class Param:
    """One policy parameter: its type, its default and the range it must lie in."""

    kind: type  # int or float
    default: int | float | None  # None: derived from the context when the policy is built
    doc: str
    low: float = 0.0  # the least value allowed
    low_open: bool = False  # the least value itself is excluded
    high: float | None = None
    high_open: bool = False

    def bounds(self) -> str:
        left = f"{'(' if self.low_open else '['}{self.low:g}"
        right = "inf)" if self.high is None else f"{self.high:g}{')' if self.high_open else ']'}"
        return f"{left}, {right}"

    def check(self, owner: str, name: str, value: int | float) -> int | float:
        """``value`` if it is of this kind and in range; ValueError naming the bound otherwise."""
        if self.kind is int and (isinstance(value, bool) or not isinstance(value, int)):
            raise ValueError(f"{owner}: {name} must be an integer, got {value!r}")
        if not math.isfinite(value):
            raise ValueError(f"{owner}: {name} must be finite, got {value!r}")
        below = value <= self.low if self.low_open else value < self.low
        above = self.high is not None and (value >= self.high if self.high_open else value > self.high)
        if below or above:
            raise ValueError(f"{owner}: {name} must be in {self.bounds()}, got {value!r}")
        return value


class Policy:
    """The base policy, ``fcfs``: cap = the cell's batch size, admission in queue order, the newest preempted.

    The queue order is the scheduler's: arrival order (requests' priorities play no part, as in vLLM's fcfs), a
    preempted request back at the head. Subclasses override what they decide differently.
    """

    name: ClassVar[str] = "fcfs"
    PARAMS: ClassVar[dict[str, Param]] = {}

    def __init__(self, ctx: PolicyContext, **params: int | float | None) -> None:
        self.ctx = ctx
        self.params = self.resolve(params)
        self.displaced = 0  # running requests preempted to admit a waiting one (the scheduler counts them)

    @classmethod
    def resolve(cls, params: Mapping[str, int | float | None]) -> dict[str, int | float | None]:
        """Every parameter, the defaults filled, range-checked; ValueError for an unknown or contradicting one."""
        unknown = sorted(set(params) - set(cls.PARAMS))
        if unknown:
            raise ValueError(f"{cls.name}: unknown parameter(s) {', '.join(unknown)}; {cls.known_params()}")
        out: dict[str, int | float | None] = {}
        for key, param in cls.PARAMS.items():
            value = params.get(key, param.default)
            out[key] = None if value is None else param.check(cls.name, key, value)
        cls.check_together(out)
        return out

    @classmethod
    def check_together(cls, params: Mapping[str, int | float | None]) -> None:
        """ValueError if parameters contradict each other (None: not known yet, skipped)."""

    @classmethod
    def known_params(cls) -> str:
        if not cls.PARAMS:
            return f"{cls.name} takes no parameters"
        return f"{cls.name} takes: " + ", ".join(f"{k} (default {p.default}; {p.doc})" for k, p in cls.PARAMS.items())

    def cap(self, waiting: Sequence[Request], running: Sequence[Request]) -> int:
        """The most requests that run this step; admission stops while ``len(running) >= cap``."""
        return self.ctx.batch_size

    def budget(self, configured: int | None) -> int | None:
        """Tokens this step may run (None: no limit); ``configured`` is the engine's ``max_step_tokens``."""
        return configured

    def arrive(self, request: Request, waiting: Sequence[Request]) -> None:
        """``request`` is about to join ``waiting`` (called before it is queued)."""

    def select(self, waiting: Sequence[Request], running: Sequence[Request]) -> Request | None:
        """The waiting request to admit next, or None to admit no more this step (it must be in ``waiting``)."""
        return waiting[0] if waiting else None

    def admitted(self, request: Request, waiting: Sequence[Request]) -> None:
        """``request`` was admitted (taken from ``waiting``, the queue left, into the running set)."""

    def victim(self, candidates: Sequence[Request]) -> Request:
        """Whom to preempt when KV blocks run out: one of ``candidates`` (running requests not yet scheduled this
        step, the one that needs blocks first, in admission order)."""
        return candidates[-1]

    def displaceable(self, request: Request, running: Sequence[Request]) -> Sequence[Request]:
        """Running requests ``request`` may preempt, in order, when the cap or the KV blocks keep it waiting."""
        return ()

    def observe(self, report: StepReport) -> None:
        """Feedback after every step."""

    def state(self) -> dict[str, int | float | str]:
        """What this policy did, for the run's record."""
        return {"policy": self.name, "displaced": self.displaced}
