"""``continuous``: batchperf's own continuous batching (paged KV, one forward pass per step).

The engine in :mod:`batchperf.engine` does the work: a torch-free scheduler
admits requests as slots free up, a block manager hands out KV blocks, and the
model runner packs every scheduled request into one forward pass;
:class:`~batchperf.engine.llm_engine.LLMEngine` wires them into one ``step()``.
This module only adapts it to the client feed (:mod:`batchperf.backends.drive`):
each drive step is one engine step, whose tokens get the time the clock read
after it (after a device synchronisation): one token per request per step, so
each token is a chunk of its own. EOS is masked until the target, so
each request generates exactly its target, as ``hf-static``'s ``min_new_tokens``.

KV per request is measured from the blocks it held at its peak (whole blocks;
``kv_tokens`` is the tokens those blocks held), not assumed.
"""

from __future__ import annotations

from typing import Any

from batchperf.backends import inject
from batchperf.backends.drive import Finished, Sent, drive
from batchperf.backends.model import LoadedModel
from batchperf.engine.block_manager import BlockManager, blocks_for
from batchperf.engine.llm_engine import LLMEngine
from batchperf.engine.policies import KNOWN_POLICIES, Policy, PolicyContext, PolicySpec, TenantTargets
from batchperf.engine.request import Request
from batchperf.engine.scheduler import SchedulerConfig
from batchperf.measure.clock import RunClock
from batchperf.measure.counters import round_counters
from batchperf.measure.kv import kv_tokens_held
from batchperf.measure.trace import RequestTrace, RunTrace
from batchperf.workload.spec import Workload

DEFAULT_BLOCK_SIZE = 16  # tokens per KV block, as vLLM


def _eos_ids(model: LoadedModel) -> set[int]:
    ids: set[int] = set()
    for source in (model.config, getattr(model.model, "generation_config", None)):
        value = getattr(source, "eos_token_id", None)
        if isinstance(value, int):
            ids.add(value)
        elif value is not None:
            ids.update(int(v) for v in value)
    return ids


def policy_context(workload: Workload, batch_size: int) -> PolicyContext:
    """What a policy is told of a cell: its batch size (the static cap) and each tenant's SLOs (``workload.slos``)
    and priority (the lowest, i.e. most urgent, of its requests'); ``""`` is the requests without a tenant."""
    priorities: dict[str, int] = {}
    for r in workload.requests:
        tenant = r.tenant or ""
        priorities[tenant] = min(priorities.get(tenant, r.priority), r.priority)
    tenants = {}
    for tenant in sorted(set(priorities) | set(workload.slos)):
        slo = workload.slos.get(tenant)
        tenants[tenant] = TenantTargets(None if slo is None else slo.ttft_ms, None if slo is None else slo.tpot_ms,
                                        None if slo is None else slo.e2el_ms, priority=priorities.get(tenant, 0))
    return PolicyContext(batch_size=batch_size, tenants=tenants)


def build_policy(policy: PolicySpec, workload: Workload, batch_size: int) -> Policy:
    """A fresh ``policy`` for one run of ``workload``; CellUnsupported (the cell is skipped with the reason) when the
    cell does not give it what it needs (aimd and seed without a TTFT or TPOT SLO to aim at, a cap above the batch)."""
    from batchperf.backends import CellUnsupported

    try:
        return policy.build(policy_context(workload, batch_size))
    except ValueError as exc:
        raise CellUnsupported(f"policy {policy.text!r} cannot run this cell: {exc}") from None


def policy_record(policy: Policy | None) -> dict[str, Any]:
    """``RunTrace.policy`` of a run: the engine, and the policy's ``state()`` with its per-tenant numbers (fair's
    virtual token counters, ``counter_<tenant>``) gathered under ``counters`` by tenant ("" for no tenant)."""
    state = dict(policy.state()) if policy is not None else {"policy": "fcfs"}
    counters = {}
    for key in [k for k in state if k.startswith("counter_")]:
        tenant = key.removeprefix("counter_")
        counters["" if tenant == "-" else tenant] = state.pop(key)
    return {"engine": "batchperf", **state, **({"counters": counters} if counters else {})}


def engine_priority_note(policy: str) -> tuple[bool, str]:
    """(honoured, why) of the requests' priorities under a policy of batchperf's own engine (``continuous``)."""
    if policy == "priority":
        return True, ("continuous: policy priority: admitted lower priority first, and an urgent arrival may preempt "
                      "a less urgent running request")
    return False, f"continuous: policy {policy}: priorities play no part (admission in arrival order" + (
        ", or by the tenants' virtual token counters)" if policy == "fair" else ")")


class ContinuousBackend:
    name = "continuous"
    # under the default fcfs; a run's policy says what it did (suite.cell.workload_section reads RunTrace.policy)
    priority_support = (False, "policy fcfs: batchperf's engine admits in arrival order (priorities play no part)")
    policies = KNOWN_POLICIES  # every policy of batchperf.engine.policies (--batchperf-policies)

    def prefix_caching_for(self, workload: Workload) -> bool:
        return False  # it shares no blocks: its prefix-cache hits are 0, reported as such

    def __init__(
        self,
        model: LoadedModel,
        block_size: int = DEFAULT_BLOCK_SIZE,
        num_blocks: int | None = None,
        max_step_tokens: int | None = None,
    ) -> None:
        """``num_blocks``: the KV pool (default: room for ``batch_size`` of the workload's longest requests);
        ``max_step_tokens``: a token budget per forward pass, which chunks long prompts (default: none)."""
        from batchperf.backends import BackendUnavailable
        from batchperf.engine.model_runner import ModelRunner

        if block_size < 1:
            raise ValueError(f"block_size must be >= 1 token, got {block_size}")
        if num_blocks is not None and num_blocks < 1:
            raise ValueError(f"num_blocks must be >= 1, got {num_blocks}")
        self.model = model
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.max_step_tokens = max_step_tokens
        try:
            self.runner = ModelRunner(model.model, block_size, suppress_ids=_eos_ids(model))
        except ValueError as exc:
            raise BackendUnavailable(f"continuous: model {model.name!r}: {exc}") from exc
        # BATCHPERF_INJECT_*: the runner runs the weights through its own forward, which the module's hook never sees
        self.runner.logits = inject.slowed(self.runner.logits, device=self.runner.device)  # type: ignore[method-assign]

    def close(self) -> None:
        self.runner.kv = None

    def pool_blocks(self, workload: Workload, batch_size: int) -> int:
        """Blocks in the pool: as given, or enough for ``batch_size`` of the longest requests at once."""
        if self.num_blocks is not None:
            return self.num_blocks
        longest = max(kv_tokens_held(r.prompt_len, r.target_len) for r in workload.requests)
        return batch_size * blocks_for(longest, self.block_size)

    def run(self, workload: Workload, batch_size: int, concurrency: int, policy: PolicySpec | None = None) -> RunTrace:
        """``policy``: the batching policy its scheduler runs (None: fcfs, the engine's own), built afresh for the
        run from the cell's batch size and the workload's tenants; what it did is in ``RunTrace.policy``."""
        num_blocks = self.pool_blocks(workload, batch_size)
        self.runner.allocate(num_blocks, batch_size)
        blocks = BlockManager(num_blocks, self.block_size, self.runner.bytes_per_block)
        built = None if policy is None else build_policy(policy, workload, batch_size)
        engine = LLMEngine(SchedulerConfig(batch_size, self.max_step_tokens), blocks, self.runner, policy=built)
        clock = RunClock(self.model.device)
        trace = drive(self.name, workload, batch_size, concurrency, clock, _EngineRun(engine, clock))
        trace.policy = policy_record(built)
        return trace


class _EngineRun:
    """One run: a request enters the engine between steps, as sent; each step is one engine step."""

    blocking_step = True  # an engine step runs to its end: a request sent meanwhile waits for the next

    def __init__(self, engine: LLMEngine, clock: RunClock) -> None:
        self.engine = engine
        self.clock = clock
        self.arrivals: dict[int, float] = {}  # request id -> when the client released it
        self.prompt_tokens = 0  # sent in this run

    def add(self, request: Sent) -> None:
        spec = request.spec
        self.arrivals[spec.request_id] = request.arrival
        self.prompt_tokens += spec.prompt_len
        # the engine's arrival is the send (during a step, if the sender sent it then: it waited for this one)
        self.engine.add(Request(spec.request_id, spec.prompt_ids, spec.target_len, request.sent,
                                priority=spec.priority, tenant=spec.tenant or ""))

    @property
    def has_work(self) -> bool:
        return self.engine.has_work

    def step(self, until: float | None) -> list[Finished]:
        done = self.engine.step(self.clock)
        traces = [_trace(r, self.arrivals.pop(r.request_id), self.engine.blocks.bytes_per_block) for r in done]
        return [Finished(t, t.finished) for t in traces]

    def kv_figures(self) -> dict[str, Any]:
        blocks = self.engine.blocks
        return {
            "kv_cache_peak_bytes": blocks.peak_used * blocks.bytes_per_block,
            "kv_layout": "paged",
            "block_size": blocks.block_size,
            "bytes_per_block": blocks.bytes_per_block,
            "num_blocks": blocks.num_blocks,
            "pool_bytes": blocks.num_blocks * blocks.bytes_per_block,
            "preemptions": self.engine.scheduler.num_preemptions,
        }

    def counters(self) -> dict[str, Any]:
        stats, blocks = self.engine.stats, self.engine.blocks
        return round_counters(
            {
                "num_preemptions": self.engine.scheduler.num_preemptions,
                "kv_cache_usage_perc": blocks.peak_used / blocks.num_blocks,
                "num_requests_running": stats.peak_running,
                "num_requests_waiting": stats.peak_waiting,
                "engine_steps": stats.steps,
                "iteration_tokens_total": stats.tokens,
                "running_request_steps": stats.request_steps,
                # no prefix cache: every prompt token sent is computed, none is served from a cache
                "prefix_cache_queries": self.prompt_tokens,
                "prefix_cache_hits": 0,
            },
            {
                # a rate of 0 by construction would be a baseline the gate cannot judge a drop from
                "prefix_cache_hit_rate": "batchperf's engine shares no KV blocks between requests: its prefix-cache "
                                         "hits are 0 of its queries (every prompt token is computed)",
                "padding_waste": "no padding: one forward pass packs the ragged requests",
                "request_prefill_time_seconds": STEPS_MIX,
                "request_decode_time_seconds": STEPS_MIX,
            },
            "batchperf.engine: the scheduler and block manager, every step",
        )

    def close(self) -> None:
        pass


STEPS_MIX = "a step of batchperf's engine mixes prefill and decode; it times neither apart"


def _trace(request: Request, arrival: float, bytes_per_block: int) -> RequestTrace:
    return RequestTrace(
        request_id=request.request_id,
        prompt_len=request.prompt_len,
        target_len=request.target_len,
        arrival=arrival,
        scheduled=request.scheduled if request.scheduled is not None else request.arrival,
        token_times=tuple(request.token_times),
        kv_tokens=request.peak_tokens,
        kv_bytes=request.peak_blocks * bytes_per_block,
        sent=request.arrival,
        chunk_sizes=(1,) * len(request.token_times),  # an engine step yields one token per request
    )
