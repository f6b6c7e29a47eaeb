"""``hf-continuous``: transformers' built-in continuous batching (``init_continuous_batching``).

``batch_size`` is the manager's ``max_requests_per_batch``; block sharing
(prefix caching) is off, as for the other backends. Requests are added as the
workload's feed releases them, each with ``max_new_tokens`` = its target and no
EOS (``eos_token_id=-1``), so it generates exactly its target. The manager
records a ``time.perf_counter`` timestamp per generated token
(``record_timestamps``), which is converted to run time; results are read as
each request finishes.

The manager (its paged KV cache, batch processor and generation thread) is
built once per batch size and kept running across cells; restarting it costs
a batch-processor reset at the start of every run. It is created with
``auto_switch_to_flash=False`` so it keeps the model's (sdpa) attention, which
other backends share; where it must switch (an eager model becomes
``paged|eager``) it is stopped after each run, which switches the model back.
"""

from __future__ import annotations

import time
from typing import Any

from batchperf.backends.drive import Finished, Sent, drive
from batchperf.backends.model import LoadedModel
from batchperf.measure.clock import RunClock
from batchperf.measure.counters import absent_all, round_counters
from batchperf.measure.kv import kv_bytes_per_token, kv_tokens_held
from batchperf.measure.trace import RequestTrace, RunTrace
from batchperf.workload.spec import Workload

RESULT_POLL_S = 0.5  # longest wait for a result before checking that the manager's thread is alive
START_TIMEOUT_S = 300.0  # building the batch processor allocates the whole KV pool

# On a CPU, transformers' defaults are sized for a GPU: ~90% of free memory as KV pool, 8192-token
# batches, and K/V padded to multiples of 16384 tokens (to bound the number of CUDA graphs).
# Without graphs the padding is pure waste (a 64-token prompt's first step took 9 s), and its
# warm-up runs the largest shapes (87 s). So on a CPU: a 1 GiB pool (as the vllm backend's),
# vLLM's default 2048-token step budget, padding to one page, and no warm-up (the workload's
# warm-up requests warm it instead).
CPU_KV_POOL_BYTES = 1 << 30
CPU_MAX_BATCH_TOKENS = 2048
STEP_COUNT_SETTLE_S = 5.0  # longest wait for a started thread to reset its step count


class HFContinuousBackend:
    name = "hf-continuous"
    priority_support = (False, "transformers' continuous batching takes no per-request priority: ignored")

    def __init__(self, model: LoadedModel) -> None:
        try:
            from transformers import ContinuousBatchingConfig  # noqa: F401
        except ImportError as exc:
            from batchperf.backends import BackendUnavailable

            raise BackendUnavailable(f"this transformers has no continuous batching ({exc}); need >= 5.0") from exc
        self.model = model
        self._manager: Any = None
        self._manager_batch_size = 0

    def close(self) -> None:
        if self._manager is not None:
            self._manager.destroy()
            self.model.model.destroy_cached_continuous_batching_manager()
            self._manager = None

    def manager(self, batch_size: int) -> Any:
        """The manager for ``batch_size``, started; built (and warmed up) on first use of that size."""
        from transformers import ContinuousBatchingConfig, GenerationConfig

        if self._manager is not None and self._manager_batch_size == batch_size and self._manager.is_running():
            return self._manager
        if self._manager is not None and self._manager_batch_size != batch_size:
            self.close()
        model = self.model.model
        on_cpu = self.model.device.type == "cpu"
        config = ContinuousBatchingConfig(
            max_requests_per_batch=batch_size, allow_block_sharing=False, auto_switch_to_flash=False
        )
        if on_cpu:
            block_bytes = config.page_size * kv_bytes_per_token(self.model.config, self.model.dtype)
            config.num_blocks = max(CPU_KV_POOL_BYTES // block_bytes, 1)
            config.max_batch_tokens = CPU_MAX_BATCH_TOKENS
            config.kv_padding_interval_size = config.page_size
        manager = model.init_continuous_batching(  # returns the cached manager when there is one
            generation_config=GenerationConfig(do_sample=False, max_new_tokens=1, eos_token_id=-1),
            continuous_batching_config=config,
        )
        if not on_cpu and not manager.warmed_up:
            manager.warmup()  # captures CUDA graphs at the largest shapes
        self._manager, self._manager_batch_size = manager, batch_size
        manager.start()
        # the thread builds the batch processor (and allocates the KV pool) first: not part of any run
        deadline = time.monotonic() + START_TIMEOUT_S
        while manager.batch_processor is None:
            if not manager.is_running() or time.monotonic() > deadline:
                raise RuntimeError(f"hf-continuous: the manager did not start "
                                   f"({manager.background_thread_status.fatal_error or 'timed out'})")
            time.sleep(0.01)
        # The thread sets its step count (manager.current_batch; a run's steps are its difference) to 0 right
        # after the batch processor, and a kept processor ends the wait above at once: wait for the reset too.
        # (A transformers without the count: 5 s lost per start, and the run says engine_steps is absent.)
        settle = time.monotonic() + STEP_COUNT_SETTLE_S
        while getattr(manager, "current_batch", None) != 0 and time.monotonic() < settle:
            time.sleep(0.01)
        return manager

    def run(self, workload: Workload, batch_size: int, concurrency: int) -> RunTrace:
        manager = self.manager(batch_size)
        clock = RunClock(self.model.device)
        run = _ManagerRun(manager, clock, kv_bytes_per_token(self.model.config, self.model.dtype))
        return drive(self.name, workload, batch_size, concurrency, clock, run)


class _ManagerRun:
    """One run: a request goes to the manager when sent; each step waits for the next result."""

    blocking_step = False  # a step waits for a result by ``until``; the manager's own thread runs the model

    def __init__(self, manager: Any, clock: RunClock, bytes_per_token: int) -> None:
        self.manager = manager
        self.clock = clock
        self.bytes_per_token = bytes_per_token
        self.sent: dict[str, Sent] = {}  # manager's request id -> the request and its client times
        self.steps_before: int | None = getattr(manager, "current_batch", None)  # forward passes so far

    def add(self, request: Sent) -> None:
        spec = request.spec
        key = f"bp-{spec.request_id}"
        self.sent[key] = request
        self.manager.add_request(
            input_ids=list(spec.prompt_ids), request_id=key, max_new_tokens=spec.target_len,
            record_timestamps=True, eos_token_id=-1,
        )

    @property
    def has_work(self) -> bool:
        return bool(self.sent)

    def step(self, until: float | None) -> list[Finished]:
        wait = RESULT_POLL_S if until is None else min(RESULT_POLL_S, max(until - self.clock.now(), 0.0))
        result = self.manager.get_result(timeout=wait)
        if result is None:
            if not self.manager.is_running():
                raise RuntimeError(f"hf-continuous: the generation thread stopped "
                                   f"({self.manager.background_thread_status.fatal_error})")
            return []
        trace = self._trace(self.sent.pop(result.request_id), result)
        return [Finished(trace, trace.finished)]

    def _trace(self, request: Sent, result: Any) -> RequestTrace:
        # transformers stamps tokens with time.perf_counter(); the clock maps those readings to run time
        times = tuple(self.clock.since_start(t) for t in (result.timestamps or ()))
        spec = request.spec
        held = kv_tokens_held(spec.prompt_len, len(times))
        return RequestTrace(
            request_id=spec.request_id,
            prompt_len=spec.prompt_len,
            target_len=spec.target_len,
            arrival=request.arrival,
            scheduled=max(self.clock.since_start(result.lifespan[0]), request.sent),
            token_times=times,
            kv_tokens=held,
            kv_bytes=held * self.bytes_per_token,
            error=result.error,
            sent=request.sent,
            chunk_sizes=(1,) * len(times),  # a timestamp per token, each from its own generation step
        )

    def kv_figures(self) -> dict[str, Any]:
        config = self.manager.continuous_batching_config
        return {
            "kv_layout": f"paged, {config.page_size}-token pages (transformers continuous batching)",
            "block_size": config.page_size,
            "kv_pool_blocks": config.num_blocks,
            "max_batch_tokens": config.max_batch_tokens,
        }

    def counters(self) -> dict[str, Any]:
        # The manager counts the generation steps that ran a forward pass (current_batch); nothing else of its
        # scheduler (tokens or requests per step, preemptions, KV use) is exposed.
        why = "transformers' continuous batching manager counts only its steps; it exposes no other scheduler counters"
        steps = getattr(self.manager, "current_batch", None)
        if self.steps_before is None or steps is None or steps < self.steps_before:
            missing = ("this transformers' manager has no step count (current_batch)" if steps is None
                       else "the manager's step count restarted during the run")
            return round_counters({}, {**absent_all(why), "engine_steps": missing}, "hf-continuous: none")
        return round_counters({"engine_steps": steps - self.steps_before}, absent_all(why, except_=("engine_steps",)),
                              "hf-continuous: the manager's count of generation steps (current_batch)")

    def close(self) -> None:
        for key in self.sent:  # a failed run must not leave requests in the kept manager
            self.manager.cancel_request(key)
        if self.manager._original_attn_impl is not None:  # it switched the shared model's attention: restore it
            self.manager.stop(block=True, keep_for_next_session=True)
