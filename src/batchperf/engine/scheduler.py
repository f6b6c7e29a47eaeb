"""The continuous-batching scheduler: which requests run this step, and how many tokens each.

Torch-free. Every step:

1. each running request, oldest first, gets its next tokens (one to decode, or
   the rest of its prompt, up to the step's token budget) and the KV blocks to
   hold them; when blocks run out, the newest running request is preempted —
   its blocks are freed and it goes back to the head of the queue, to be
   recomputed (prompt and the tokens it has generated) when readmitted;
2. if nothing was preempted, waiting requests are admitted in priority order (lower first, FIFO within a
   priority; a preempted request goes back first) while
   fewer than ``batch_size`` run, the budget lasts and their blocks are free.

The model runner then runs ONE forward pass over everything scheduled, and
:meth:`Scheduler.postprocess` appends the sampled tokens; a finished request
leaves at once, so its slot is refilled on the very next step.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from batchperf.engine.block_manager import BlockManager, blocks_for
from batchperf.engine.request import Request, Status


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    batch_size: int  # most requests running at once
    max_step_tokens: int | None = None  # tokens per forward pass (chunked prefill); None: no limit

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.max_step_tokens is not None and self.max_step_tokens < self.batch_size:
            raise ValueError(
                f"max_step_tokens ({self.max_step_tokens}) must be >= batch_size ({self.batch_size}) "
                "so every running request can decode each step"
            )


@dataclass(frozen=True, slots=True)
class Scheduled:
    """Run ``request.tokens[num_cached : num_cached + num_new]`` this step."""

    request: Request
    num_new: int
    samples: bool  # the chunk reaches the request's last token, so the step samples its next one

    @classmethod
    def of(cls, request: Request, num_new: int) -> Scheduled:
        return cls(request, num_new, request.num_cached + num_new == request.num_tokens)


class Scheduler:
    def __init__(self, config: SchedulerConfig, blocks: BlockManager) -> None:
        self.config = config
        self.blocks = blocks
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []  # admission order: oldest first
        self.num_preemptions = 0

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def add(self, request: Request) -> None:
        """Queue ``request``; ValueError if the whole pool could not hold it even alone."""
        held = request.prompt_len + request.target_len - 1
        need = blocks_for(held, self.blocks.block_size)
        if need > self.blocks.num_blocks:
            raise ValueError(
                f"request {request.request_id} needs {need} KV blocks ({held} tokens) but the pool has "
                f"{self.blocks.num_blocks}; give the backend more KV blocks or use shorter prompts"
            )
        request.status = Status.WAITING
        # behind every waiting request of the same or a better (lower) priority: FIFO within a priority
        at = len(self.waiting)
        while at > 0 and self.waiting[at - 1].priority > request.priority:
            at -= 1
        self.waiting.insert(at, request)

    def schedule(self, now: float = 0.0) -> list[Scheduled]:
        """This step's work; ``now`` (s) stamps first admissions."""
        budget = self.config.max_step_tokens or float("inf")
        step: list[Scheduled] = []
        preempted = False
        i = 0
        while i < len(self.running) and budget > 0:
            request = self.running[i]
            num_new = int(min(request.num_uncached, budget))
            while not self.blocks.can_hold(request, request.num_cached + num_new):
                preempted = True
                self._preempt(self.running[-1])
                if request.status is Status.WAITING:  # it was the newest: nothing left to free
                    break
            if request.status is Status.WAITING:
                break
            self.blocks.reserve(request, request.num_cached + num_new)
            step.append(Scheduled.of(request, num_new))
            budget -= num_new
            i += 1
        while not preempted and self.waiting and len(self.running) < self.config.batch_size and budget > 0:
            request = self.waiting[0]
            num_new = int(min(request.num_uncached, budget))
            if not self.blocks.can_hold(request, num_new):
                break  # FIFO: nobody overtakes the head of the queue
            self.waiting.popleft()
            self.blocks.reserve(request, num_new)
            request.status = Status.RUNNING
            if request.scheduled is None:
                request.scheduled = now
            self.running.append(request)
            step.append(Scheduled.of(request, num_new))
            budget -= num_new
        return step

    def postprocess(self, step: list[Scheduled], sampled: list[int | None], now: float) -> list[Request]:
        """Record the step's results (``sampled[i]`` for ``step[i]``); return the requests that finished."""
        if len(sampled) != len(step):
            raise ValueError(f"got {len(sampled)} sampled tokens for a step of {len(step)} requests")
        finished = []
        for item, token in zip(step, sampled):
            request = item.request
            request.num_cached += item.num_new
            if token is None:
                continue
            request.tokens.append(token)
            request.token_times.append(now)
            if request.is_finished:
                request.status = Status.FINISHED
                self.blocks.release(request)
                finished.append(request)
        if finished:
            self.running = [r for r in self.running if r.status is Status.RUNNING]
        return finished

    def _preempt(self, request: Request) -> None:
        """Free ``request``'s blocks and put it back at the head of the queue (recompute later)."""
        self.running.remove(request)
        self.blocks.release(request)
        request.status = Status.WAITING
        request.preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(request)
