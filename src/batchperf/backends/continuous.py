"""``continuous``: batchperf's own continuous batching (paged KV, one forward pass per step).

The engine in :mod:`batchperf.engine` does the work: a torch-free scheduler
admits requests as slots free up, a block manager hands out KV blocks, and the
model runner packs every scheduled request into one forward pass. This module
only drives it with the client feed and the clock, as ``hf-static`` does: after
every step the clock is read (after a device synchronisation) and that time is
given to each token the step produced. EOS is masked until the target, so each
request generates exactly its target, as ``hf-static``'s ``min_new_tokens``.

KV per request is measured from the blocks it held at its peak (whole blocks;
``kv_tokens`` is the tokens those blocks held), not assumed.
"""

from __future__ import annotations

from batchperf.measure.clock import RunClock
from batchperf.engine.block_manager import BlockManager, blocks_for
from batchperf.engine.request import Request
from batchperf.engine.scheduler import Scheduler, SchedulerConfig
from batchperf.measure.feed import RequestFeed
from batchperf.measure.kv import kv_tokens_held
from batchperf.measure.memory import memory_figures, reset_peak
from batchperf.suite.models import LoadedModel
from batchperf.measure.trace import RequestTrace, RunTrace
from batchperf.measure.workload import Workload

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


class ContinuousBackend:
    name = "continuous"

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

    def close(self) -> None:
        self.runner.kv = None

    def pool_blocks(self, workload: Workload, batch_size: int) -> int:
        """Blocks in the pool: as given, or enough for ``batch_size`` of the longest requests at once."""
        if self.num_blocks is not None:
            return self.num_blocks
        longest = max(kv_tokens_held(r.prompt_len, r.target_len) for r in workload.requests)
        return batch_size * blocks_for(longest, self.block_size)

    def run(self, workload: Workload, batch_size: int, concurrency: int) -> RunTrace:
        clock = RunClock(self.model.device)
        feed = RequestFeed(workload.requests, workload.max_in_flight(concurrency))
        num_blocks = self.pool_blocks(workload, batch_size)
        self.runner.allocate(num_blocks)
        blocks = BlockManager(num_blocks, self.block_size, self.runner.bytes_per_block)
        scheduler = Scheduler(SchedulerConfig(batch_size, self.max_step_tokens), blocks)
        done: list[RequestTrace] = []
        reset_peak(self.model.device)
        clock.start()
        now = clock.now()
        while not feed.done:
            for spec, arrival in feed.poll(now):
                scheduler.add(Request(spec.request_id, spec.prompt_ids, spec.target_len, arrival))
            if not scheduler.has_work:
                release = feed.next_release()
                if release is None:
                    raise RuntimeError("continuous: nothing queued and nothing to release; the feed is stuck")
                clock.sleep_until(release)
                now = clock.now()
                continue
            step = scheduler.schedule(now)
            if not step:
                raise RuntimeError(f"continuous: requests wait but none could be scheduled ({num_blocks} KV blocks)")
            sampled = self.runner.run(step)
            now = clock.now()  # after the sync: every token of this step exists from here
            for request in scheduler.postprocess(step, sampled, now):
                feed.complete(request.request_id, now)
                done.append(self._trace(request, blocks.bytes_per_block))
        bytes_per_block = blocks.bytes_per_block
        return RunTrace(
            backend=self.name,
            batch_size=batch_size,
            concurrency=concurrency,
            requests=sorted(done, key=lambda t: t.request_id),
            end=max(t.finished for t in done),
            memory=memory_figures(self.model.device),
            kv={
                "kv_cache_peak_bytes": blocks.peak_used * bytes_per_block,
                "kv_layout": "paged",
                "block_size": self.block_size,
                "bytes_per_block": bytes_per_block,
                "num_blocks": num_blocks,
                "pool_bytes": num_blocks * bytes_per_block,
                "preemptions": scheduler.num_preemptions,
            },
        )

    @staticmethod
    def _trace(request: Request, bytes_per_block: int) -> RequestTrace:
        return RequestTrace(
            request_id=request.request_id,
            prompt_len=request.prompt_len,
            target_len=request.target_len,
            arrival=request.arrival,
            scheduled=request.scheduled if request.scheduled is not None else request.arrival,
            token_times=tuple(request.token_times),
            kv_tokens=request.peak_tokens,
            kv_bytes=request.peak_blocks * bytes_per_block,
        )
