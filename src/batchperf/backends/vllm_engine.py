"""``vllm``: vLLM's engine in this process, driven one step at a time.

``batch_size`` is the engine's ``max_num_seqs``. Requests are token-id prompts
sent when the workload's feed releases them; each asks for exactly its target
(``ignore_eos``, ``max_tokens`` = target, greedy, no detokenisation). After
every ``step()`` the clock is read and each token the step returned gets that
time, so TTFT and ITL are per step, not averages; the tokens one step gave a
request (one, or more under speculative decoding) are one chunk. The engine is built once per
batch size, prefix-caching setting and scheduling policy and reused across cells
(building one compiles the model: tens of seconds on a CPU). Prefix caching is on for a
workload that shares prefixes (a shared-prefix or trace workload with an expected hit rate)
and then emptied before each run, so every round starts cold and measures the workload's own
reuse; the priority policy (``scheduling_policy="priority"``, each request's priority) is
used when some request has a priority other than 0. On a GPU, one engine at a time
holds the card: building another (another batch size, or another model's
backend) shuts the others down first, and ``gpu_memory_utilization`` is
computed from the free memory then (``_vllm.gpu_memory_utilization``), so that
vLLM and the suite's own HF copy of the model fit together.

A model on dummy weights (:mod:`batchperf.backends.dummy`) is given to vLLM as
the same config folder with ``load_format="dummy"`` and no tokenizer.

KV figures come from vLLM itself: the block size and bytes per block of its
cache config, and the most blocks each request's block table held. Engine
counters (preemptions, KV usage, steps, ...) come from the scheduler stats vLLM
hands its stat loggers every step (:mod:`batchperf.backends.vllm_stats`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from batchperf.backends._vllm import (
    cuda_memory_utilization,
    import_vllm,
    kv_block_figures,
    speed_settings,
    step_budget_args,
    third_party_warnings_ignored,
    weights_args,
)
from batchperf.backends.drive import Finished, Sent, drive
from batchperf.backends.model import LoadedModel
from batchperf.backends.vllm_policy import VLLM_POLICIES, runs_priority, vllm_policy
from batchperf.backends.vllm_stats import StepSink, stat_logger_factory
from batchperf.measure.clock import RunClock
from batchperf.measure.kv import kv_bytes_per_token, kv_tokens_held
from batchperf.measure.trace import RequestTrace, RunTrace
from batchperf.workload.spec import RequestSpec, Workload

if TYPE_CHECKING:
    from batchperf.engine.policies import PolicySpec


@dataclass(slots=True)
class _Live:
    """A request the engine holds: its spec, when it was released and sent, and what it produced so far."""

    spec: RequestSpec
    arrival: float
    sent: float
    scheduled: float | None = None
    token_times: list[float] = field(default_factory=list)
    chunk_sizes: list[int] = field(default_factory=list)  # tokens of each engine step that gave it any
    max_blocks: int = 0

    def took(self, tokens: int, now: float) -> None:
        """One engine step gave it ``tokens`` tokens (one chunk), ready at ``now``."""
        if tokens:
            self.token_times.extend([now] * tokens)
            self.chunk_sizes.append(tokens)

    def trace(self, bytes_per_token: int) -> RequestTrace:
        held = kv_tokens_held(self.spec.prompt_len, len(self.token_times))
        return RequestTrace(
            request_id=self.spec.request_id,
            prompt_len=self.spec.prompt_len,
            target_len=self.spec.target_len,
            arrival=self.arrival,
            scheduled=self.sent if self.scheduled is None else self.scheduled,
            token_times=tuple(self.token_times),
            kv_tokens=held,
            # the slots its tokens fill; whole blocks reserved are in RunTrace.kv
            kv_bytes=held * bytes_per_token,
            sent=self.sent,
            chunk_sizes=tuple(self.chunk_sizes),
        )


class VLLMEngineBackend:
    name = "vllm"
    prefix_caching = False  # a warm prefix cache inflates numbers; ``vllm-prefix-cache`` turns it on
    priority_support = (True, "vLLM's priority scheduling policy, each request's priority (lower first)")
    policies = VLLM_POLICIES  # --batchperf-policies: vLLM's own scheduling_policy

    def __init__(self, model: LoadedModel, *, enforce_eager: bool = False, tensor_parallel_size: int = 1,
                 kv_blocks: int | None = None, max_model_len: int | None = None) -> None:
        """``kv_blocks``: the KV pool in vLLM blocks (``num_gpu_blocks_override``; default: vLLM's sizing);
        ``max_model_len``: the longest request (default: the model's), which the pool must hold."""
        import_vllm()
        self.model = model
        self.enforce_eager = enforce_eager
        self.tensor_parallel_size = tensor_parallel_size
        self.kv_blocks = kv_blocks
        self.max_model_len = max_model_len or model.max_model_len
        self._engines: dict[EngineKey, Any] = {}  # (max_num_seqs, prefix caching, priority policy) -> LLMEngine
        self._sinks: dict[EngineKey, StepSink] = {}  # the same key -> its engine's per-step stats
        self._serving_threads = 1  # torch threads vLLM chose for its engine

    def close(self) -> None:
        for engine in self._engines.values():
            _shutdown(engine)
        self._engines.clear()
        self._sinks.clear()
        _ON_GPU.discard(self)

    def engine_settings(self, batch_size: int) -> dict[str, Any]:
        """What the cell's engine ran with that moves its speed (:func:`speed_settings`), recorded in its record;
        vLLM read the variables when first imported (:func:`import_vllm`, in ``__init__``)."""
        return speed_settings(os.environ, {
            "enforce_eager": self.enforce_eager, "num_gpu_blocks_override": self.kv_blocks,
            "max_num_batched_tokens": step_budget_args(self.model, batch_size).get("max_num_batched_tokens")})

    def prefix_caching_for(self, workload: Workload) -> bool:
        """Prefix caching on for a workload that shares prefixes (and always for ``vllm-prefix-cache``)."""
        return self.prefix_caching or workload.expected_prefix_hit_rate is not None

    def engine(self, batch_size: int, prefix_caching: bool | None = None, priority: bool = False) -> Any:
        """The engine for ``batch_size`` (and a prefix-caching setting, a scheduling policy), built on first use."""
        key = EngineKey(batch_size, self.prefix_caching if prefix_caching is None else prefix_caching, priority)
        if key not in self._engines:
            from vllm import EngineArgs
            from vllm.v1.engine.llm_engine import LLMEngine

            on_gpu = self.model.device.type == "cuda"
            if on_gpu:  # a second engine would find the card taken: one at a time
                _free_the_gpu()

            args = EngineArgs(
                model=str(self.model.path),
                dtype=self.model.spec.dtype,
                max_num_seqs=batch_size,
                max_model_len=self.max_model_len,
                num_gpu_blocks_override=self.kv_blocks,
                enable_prefix_caching=key.prefix_caching,
                scheduling_policy="priority" if key.priority else "fcfs",
                enforce_eager=self.enforce_eager,
                tensor_parallel_size=self.tensor_parallel_size,
                seed=0,
                trust_remote_code=False,  # a model folder's own Python (its auto_map) never runs
                # On a GPU the suite's own HF copy of the model stays loaded beside vLLM's: leave it room
                # (vLLM's default takes 90% of the card whatever is already on it)
                **({"gpu_memory_utilization": cuda_memory_utilization(self.model)} if on_gpu else {}),
                **weights_args(self.model.weights),
                **step_budget_args(self.model, batch_size),
                disable_log_stats=False,  # the scheduler's stats feed the engine counters (a server has them on too)
            )
            import torch

            threads, set_threads = torch.get_num_threads(), torch.set_num_threads
            try:
                sink = StepSink()
                with third_party_warnings_ignored():
                    self._engines[key] = LLMEngine.from_engine_args(
                        args, stat_loggers=[stat_logger_factory(sink)])
                self._sinks[key] = sink
                # vLLM's in-process CPU worker sets torch to its serving thread count (1) and replaces
                # torch.set_num_threads with a no-op for the whole process; every other backend in this
                # session would then run single-threaded. Keep vLLM's count for vLLM's runs only.
                self._serving_threads = torch.get_num_threads()
            finally:
                torch.set_num_threads = set_threads
                set_threads(threads)
            if on_gpu:
                _ON_GPU.add(self)
        return self._engines[key]

    def run(self, workload: Workload, batch_size: int, concurrency: int, policy: PolicySpec | None = None) -> RunTrace:
        """``policy``: fcfs or priority (vLLM's ``scheduling_policy``; the requests' priorities are sent under
        priority only); None: priority when some request has one (``workload.uses_priority``), else fcfs."""
        caching = self.prefix_caching_for(workload)
        key = EngineKey(batch_size, caching, runs_priority(workload, policy))
        engine = self.engine(*key)
        # a workload that shares prefixes starts each run cold, so it measures its own reuse (vllm-prefix-cache on a
        # synthetic workload keeps its cache across runs, as it always has)
        if workload.expected_prefix_hit_rate is not None and not engine.reset_prefix_cache():
            raise RuntimeError("vllm: the prefix cache could not be reset before the run (requests still running?)")
        clock = RunClock(self.model.device)
        with torch_threads(self._serving_threads):
            trace = drive(self.name, workload, batch_size, concurrency, clock,
                          _VllmRun(self, engine, clock, self._sinks[key], caching, key.priority))
        trace.policy = vllm_policy(key.priority)
        return trace


class _VllmRun:
    """One run: a request enters the engine between steps, as sent; each step is one ``engine.step()``."""

    blocking_step = True  # engine.step() runs to its end: a request sent meanwhile waits for the next

    def __init__(self, backend: VLLMEngineBackend, engine: Any, clock: RunClock, sink: StepSink,
                 prefix_caching: bool, priority: bool = False) -> None:
        core = getattr(engine.engine_core, "engine_core", None)  # only the in-process client has it
        if core is None:
            raise RuntimeError("vllm: the engine core runs in another process, so its block tables cannot be "
                               "read; run with VLLM_ENABLE_V1_MULTIPROCESSING=0 (batchperf's default)")
        self.engine = engine
        self.clock = clock
        self.sink = sink
        sink.reset()  # this run's steps only (the engine is reused across runs)
        self.prefix_caching = prefix_caching
        self.priority = priority  # the engine runs scheduling_policy="priority": send each request's priority
        self.scheduler = core.scheduler
        self.kv_manager = self.scheduler.kv_cache_manager
        self.block_size, self.block_bytes = kv_block_figures(self.scheduler.kv_cache_config)
        self.bytes_per_token = _checked_bytes_per_token(backend.model, self.block_size, self.block_bytes)
        self.pool_blocks = self.kv_manager.block_pool.num_gpu_blocks - 1  # vLLM keeps one null block
        self.live: dict[str, _Live] = {}  # vLLM's internal request id -> state
        self.by_external: dict[str, str] = {}
        self.blocks_held: dict[int, int] = {}  # request id -> most blocks its block table held
        self.peak_blocks = 0

    def add(self, request: Sent) -> None:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import RequestOutputKind

        spec = request.spec
        params = SamplingParams(
            max_tokens=spec.target_len, ignore_eos=True, temperature=0.0,
            detokenize=False, output_kind=RequestOutputKind.DELTA,
        )
        prompt = TokensPrompt(prompt_token_ids=list(spec.prompt_ids))
        # sent before add_request, which processes the input as a server would after the POST (and, for a request
        # sent during a step, after that step: it waited for the engine's loop, as behind a server)
        internal = self.engine.add_request(str(spec.request_id), prompt, params,
                                           priority=spec.priority if self.priority else 0)
        self.live[internal] = _Live(spec, request.arrival, request.sent)
        self.by_external[str(spec.request_id)] = internal

    @property
    def has_work(self) -> bool:
        return bool(self.engine.has_unfinished_requests())

    def step(self, until: float | None) -> list[Finished]:
        before = self.clock.now()
        outputs = self.engine.step()
        now = self.clock.now()
        self._read_block_tables(before)
        finished = []
        for out in outputs:
            state = self.live[self.by_external[out.request_id]]
            if state.scheduled is None:
                state.scheduled = before
            state.took(len(out.outputs[0].token_ids), now)
            if out.finished:
                del self.live[self.by_external.pop(out.request_id)]
                self.blocks_held[state.spec.request_id] = state.max_blocks
                finished.append(Finished(state.trace(self.bytes_per_token), now))
        return finished

    def _read_block_tables(self, before: float) -> None:
        """After a step that began at ``before``: first admissions, and the blocks each request and the pool hold."""
        for request in self.scheduler.running:  # scheduled in this step or earlier
            state = self.live.get(request.request_id)
            if state is not None:
                if state.scheduled is None:
                    state.scheduled = before
                blocks = len(self.kv_manager.get_block_ids(request.request_id)[0])  # first (only) cache group
                state.max_blocks = max(state.max_blocks, blocks)
        self.peak_blocks = max(self.peak_blocks, self.pool_blocks - self.kv_manager.block_pool.get_num_free_blocks())

    def kv_figures(self) -> dict[str, Any]:
        return {
            "kv_layout": f"paged, {self.block_size}-token blocks",
            "block_size": self.block_size,
            "bytes_per_block": self.block_bytes,
            "bytes_per_token_backend": self.bytes_per_token,
            "kv_pool_blocks": self.pool_blocks,
            "kv_cache_peak_bytes": self.peak_blocks * self.block_bytes,
            # whole blocks reserved per request, read from vLLM's block tables while it ran
            "kv_blocks_per_request": [self.blocks_held[i] for i in sorted(self.blocks_held)],
            "prefix_caching": self.prefix_caching,
        }

    def counters(self) -> dict[str, Any]:
        return self.sink.counters()

    def close(self) -> None:
        if self.by_external:  # a failed run must not leave requests in the reused engine
            self.engine.abort_request(list(self.by_external), internal=False)


class EngineKey(NamedTuple):
    batch_size: int
    prefix_caching: bool
    priority: bool  # scheduling_policy="priority"


class VLLMPrefixCacheBackend(VLLMEngineBackend):
    """The engine with automatic prefix caching on: the cell parameter for cache-sensitive runs."""

    name = "vllm-prefix-cache"
    prefix_caching = True


def _checked_bytes_per_token(model: LoadedModel, block_size: int, block_bytes: int) -> int:
    """vLLM's bytes per token, which must equal batchperf.measure.kv's analytic figure."""
    analytic = kv_bytes_per_token(model.config, model.spec.dtype)
    if block_bytes != analytic * block_size:
        raise RuntimeError(
            f"vllm: KV bytes per block from vLLM's cache config ({block_bytes} for {block_size} tokens) "
            f"differ from batchperf.measure.kv's analytic {analytic} bytes/token for {model.name}; "
            f"one of them is wrong (quantised KV cache or an unusual attention layout?)"
        )
    return analytic


@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """torch's intra-op thread count set to ``n`` inside, restored after."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


_ON_GPU: set[VLLMEngineBackend] = set()  # backends holding an engine on a GPU (at most one engine in all)


def _free_the_gpu() -> None:
    """Shut down every vLLM engine on the GPU and return its memory to the card before another starts."""
    for backend in list(_ON_GPU):
        backend.close()
    import gc

    import torch

    gc.collect()  # the engines' tensors go with their last references
    torch.cuda.empty_cache()


def _shutdown(engine: Any) -> None:
    """Release an in-process engine's executor and workers now rather than at garbage collection."""
    core = getattr(engine, "engine_core", None)
    if core is not None:
        core.shutdown()
