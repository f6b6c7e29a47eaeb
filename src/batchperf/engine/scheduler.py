"""The continuous-batching scheduler: which requests run this step, and how many tokens each.

Torch-free. Every step, with the running cap and token budget its policy gives
(:mod:`batchperf.engine.policies`; default ``fcfs``: cap = ``batch_size``, budget = ``max_step_tokens``):

1. each running request, oldest first, up to the cap, gets its next tokens (one to decode,
   or the rest of its prompt, up to the step's token budget) and the KV blocks to
   hold them; when blocks run out, the policy's victim (fcfs: the newest running request) is preempted —
   its blocks are freed and it goes back to the head of the queue, to be
   recomputed (prompt and the tokens it has generated) when readmitted. Running requests above the cap
   (when a policy lowers it) keep their blocks and wait for a step with room;
2. if nothing was preempted, waiting requests are admitted in the policy's order (fcfs: arrival order, as vLLM's
   fcfs, whatever the requests' priorities; priority: lower first; a preempted request goes back first) while
   fewer than the cap run, the budget lasts and their blocks are free; a policy may let a waiting request
   displace running ones (priority: lower-priority ones) when the cap or the blocks keep it out.

The model runner then runs ONE forward pass over everything scheduled, and
:meth:`Scheduler.postprocess` appends the sampled tokens and tells the policy what ran and when (the ``now`` of
``schedule`` and of ``postprocess``); a finished request leaves at once, so its slot is refilled on the very next
step.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from batchperf.engine.block_manager import BlockManager, blocks_for
from batchperf.engine.policies.base import Policy, PolicyContext, StepReport
from batchperf.engine.policies.fcfs import Fcfs
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
    def __init__(self, config: SchedulerConfig, blocks: BlockManager, policy: Policy | None = None) -> None:
        if policy is not None and policy.ctx.batch_size != config.batch_size:
            raise ValueError(f"the policy was built for batch size {policy.ctx.batch_size}, the scheduler runs "
                             f"{config.batch_size}; build it with PolicyContext(batch_size={config.batch_size})")
        self.config = config
        self.blocks = blocks
        self.policy = policy if policy is not None else Fcfs(PolicyContext(config.batch_size))
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []  # admission order: oldest first
        self.num_preemptions = 0
        self.cap = config.batch_size  # the running cap of the last step scheduled
        self._step = (0.0, 0, 0)  # the last schedule's now, running and waiting

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
        self.policy.arrive(request, self.waiting)
        request.status = Status.WAITING
        self.waiting.append(request)  # arrival order; a policy's ``select`` may take another (priority, fair)

    def schedule(self, now: float = 0.0) -> list[Scheduled]:
        """This step's work; ``now`` (s) stamps first admissions and starts the step the policy is told of."""
        policy = self.policy
        cap = policy.cap(self.waiting, self.running)
        if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
            raise RuntimeError(f"policy {policy.name} gave a running cap of {cap!r}; a cap is an integer >= 1")
        total = policy.budget(self.config.max_step_tokens) or float("inf")
        step: list[Scheduled] = []
        preempted = False
        i = 0
        while i < len(self.running) and len(step) < cap and total - _tokens(step) > 0:
            request = self.running[i]
            num_new = int(min(request.num_uncached, total - _tokens(step)))
            while not self.blocks.can_hold(request, request.num_cached + num_new):
                preempted = True
                self._preempt(_member(policy.victim(self.running[i:]), self.running[i:], policy, "victim"))
                if request.status is Status.WAITING:
                    break
            if request.status is Status.WAITING:
                continue  # it was preempted itself: running[i] is the next one now
            self.blocks.reserve(request, request.num_cached + num_new)
            step.append(Scheduled.of(request, num_new))
            i += 1
        while not preempted and self.waiting and total - _tokens(step) > 0:
            request = policy.select(self.waiting, self.running)
            if request is None:
                break
            _member(request, self.waiting, policy, "selection")
            num_new = int(min(request.num_uncached, total - _tokens(step)))
            if len(self.running) >= cap or not self.blocks.can_hold(request, num_new):
                if self._displace(request, num_new, cap, step):
                    continue  # room was made: try again (the budget may have grown)
                break  # nobody overtakes the policy's choice
            self.waiting.remove(request)
            self.blocks.reserve(request, num_new)
            request.status = Status.RUNNING
            if request.scheduled is None:
                request.scheduled = now
            self.running.append(request)
            step.append(Scheduled.of(request, num_new))
            policy.admitted(request, self.waiting)
        self.cap, self._step = cap, (now, len(self.running), len(self.waiting))
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
        start, running, waiting = self._step
        self.policy.observe(StepReport(start, now, tuple(item.request for item in step), _tokens(step),
                                       tuple(finished), self.cap, running, waiting))
        return finished

    def _displace(self, request: Request, num_new: int, cap: int, step: list[Scheduled]) -> bool:
        """Preempt the policy's displaceable running requests, in its order, until ``request`` fits under the
        cap and in the free blocks; preempt none and return False if all of them would not make room."""
        slots, free = cap - len(self.running), self.blocks.num_free
        need = self.blocks.blocks_needed(request, num_new)
        victims: list[Request] = []
        for victim in self.policy.displaceable(request, self.running):
            if slots >= 1 and free >= need:
                break
            _member(victim, self.running, self.policy, "displaced request")
            victims.append(victim)
            slots, free = slots + 1, free + len(victim.block_table)
        if not victims or slots < 1 or free < need:
            return False
        for victim in victims:
            step[:] = [item for item in step if item.request is not victim]
            self._preempt(victim)
        self.policy.displaced += len(victims)
        return True

    def _preempt(self, request: Request) -> None:
        """Free ``request``'s blocks and put it back at the head of the queue (recompute later)."""
        self.running.remove(request)
        self.blocks.release(request)
        request.status = Status.WAITING
        request.preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(request)


def _tokens(step: list[Scheduled]) -> int:
    return sum(item.num_new for item in step)


def _member(request: Request, pool: Sequence[Request], policy: Policy, what: str) -> Request:
    if not any(r is request for r in pool):
        raise RuntimeError(f"policy {policy.name} gave a {what} (request {request.request_id}) it was not offered")
    return request
