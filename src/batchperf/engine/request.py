"""One request's state inside the engine: its tokens, how many have K/V in the cache, its blocks.

Pure Python: the scheduler and the KV store read and change it, the model runner
only reads it. ``tokens`` is the prompt followed by every generated token;
``num_cached`` of them have their K/V written in the blocks of ``block_table``.
The last generated token is fed back on the next step, so a request that has
generated ``n`` tokens holds K/V for ``prompt_len + n - 1`` of them at most.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


class Status(Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(slots=True)
class Request:
    request_id: int
    prompt_ids: tuple[int, ...]
    target_len: int  # generate exactly this many tokens (EOS is suppressed until then)
    arrival: float = 0.0  # s, run-relative: when the client sent it
    tokens: list[int] = field(default_factory=list)
    num_cached: int = 0  # leading tokens whose K/V are in the cache
    block_table: list[int] = field(default_factory=list)
    status: Status = Status.WAITING
    scheduled: float | None = None  # s: first admission (a preempted request keeps its first)
    token_times: list[float] = field(default_factory=list)  # s: when each output token existed
    peak_blocks: int = 0  # most blocks held at once
    peak_tokens: int = 0  # most tokens with K/V held at once
    preemptions: int = 0
    priority: int = 0  # lower is admitted first (vLLM's per-request priority); ties in arrival order
    tenant: str = ""  # who sent it ("" = no tenant): the policies' per-tenant targets, caps and shares

    def __post_init__(self) -> None:
        if not self.prompt_ids:
            raise ValueError(f"request {self.request_id}: prompt_ids is empty; a request needs >= 1 prompt token")
        if self.target_len < 1:
            raise ValueError(f"request {self.request_id}: target_len must be >= 1, got {self.target_len}")
        if not self.tokens:
            self.tokens = list(self.prompt_ids)

    @property
    def prompt_len(self) -> int:
        return len(self.prompt_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.tokens)

    @property
    def output_ids(self) -> list[int]:
        return self.tokens[self.prompt_len:]

    @property
    def num_generated(self) -> int:
        return len(self.tokens) - self.prompt_len

    @property
    def num_uncached(self) -> int:
        """Tokens still to run through the model before the next token can be sampled."""
        return len(self.tokens) - self.num_cached

    @property
    def is_finished(self) -> bool:
        return self.num_generated >= self.target_len
