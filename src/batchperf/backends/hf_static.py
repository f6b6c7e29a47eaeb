"""``hf-static``: Hugging Face ``generate`` on fixed batches taken from the queue in order.

A batch runs until its longest target; each request stops *counting* at its own
target (its later tokens are discarded), and its slot at the client frees then,
as a streaming client would see it. EOS is suppressed (``min_new_tokens``) so
every request generates exactly its target. Prompts of unequal length are
left-padded. Token times come from a streamer that reads the clock after a
device synchronisation at every step.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from batchperf.backends.drive import Finished, Sent, drive
from batchperf.backends.model import LoadedModel
from batchperf.measure.clock import RunClock
from batchperf.measure.counters import round_counters
from batchperf.measure.kv import PADDED_LAYOUT
from batchperf.measure.trace import RequestTrace, RunTrace
from batchperf.workload.spec import RequestSpec, Workload


class _StepTimes:
    """A ``generate`` streamer that records when each decoding step's tokens exist."""

    def __init__(self, clock: RunClock) -> None:
        self.clock = clock
        self.times: list[float] = []
        self._seen_prompt = False

    def put(self, value: Any) -> None:
        if not self._seen_prompt:  # generate first streams the prompt itself
            self._seen_prompt = True
            return
        self.times.append(self.clock.now())

    def end(self) -> None:
        pass


def cache_bytes_and_len(cache: Any) -> tuple[int, int]:
    """Bytes of every K/V tensor a transformers cache holds, and its sequence length."""
    total = 0
    for layer in cache.layers:
        for tensor in (layer.keys, layer.values):
            if tensor is not None:
                total += tensor.numel() * tensor.element_size()
    return total, int(cache.get_seq_length())


class HFStaticBackend:
    name = "hf-static"
    priority_support = (False, "hf-static has no scheduler: batches are formed in arrival order, priority ignored")

    def __init__(self, model: LoadedModel) -> None:
        self.model = model
        self.pad_id = model.pad_token_id

    def close(self) -> None:
        pass

    def run(self, workload: Workload, batch_size: int, concurrency: int) -> RunTrace:
        clock = RunClock(self.model.device)
        return drive(self.name, workload, batch_size, concurrency, clock, _Batches(self, batch_size, clock))

    def run_batch(self, batch: list[Sent], clock: RunClock) -> tuple[list[RequestTrace], int]:
        """One fixed batch of requests through ``generate``: their traces and the KV bytes it held."""
        import torch

        device = self.model.device
        longest = max(r.spec.prompt_len for r in batch)
        max_new = max(r.spec.target_len for r in batch)
        # input_ids: [B, longest], left-padded so every row's last prompt token is aligned
        ids = torch.full((len(batch), longest), self.pad_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for row, (req, _, _) in enumerate(batch):
            ids[row, longest - req.prompt_len:] = torch.tensor(req.prompt_ids)
            mask[row, longest - req.prompt_len:] = 1
        steps = _StepTimes(clock)
        scheduled = clock.now()
        with torch.inference_mode():
            out = self.model.model.generate(
                input_ids=ids.to(device),
                attention_mask=mask.to(device),
                max_new_tokens=max_new,
                min_new_tokens=max_new,  # no EOS: exactly max_new steps for the batch
                do_sample=False,
                pad_token_id=self.pad_id,
                streamer=steps,
                return_dict_in_generate=True,
            )
        generated = out.sequences.shape[1] - longest
        kv_bytes, kv_len = cache_bytes_and_len(out.past_key_values)
        per_row = kv_bytes // len(batch)
        traces = [
            RequestTrace(
                request_id=req.request_id,
                prompt_len=req.prompt_len,
                target_len=req.target_len,
                arrival=arrival,
                scheduled=scheduled,
                token_times=tuple(steps.times[:n]),
                kv_tokens=kv_len,
                kv_bytes=per_row,
                sent=sent,
                chunk_sizes=(1,) * n,  # each decoding step streams one token per row
            )
            for req, arrival, sent in batch
            for n in [min(req.target_len, generated)]
        ]
        return traces, kv_bytes


class _Batches:
    """One run: requests queue in the order sent; each step runs the next ``batch_size`` of them to the end."""

    blocking_step = True  # a whole generate() batch: requests sent meanwhile queue for the next

    def __init__(self, backend: HFStaticBackend, batch_size: int, clock: RunClock) -> None:
        self.backend = backend
        self.batch_size = batch_size
        self.clock = clock
        self.queue: deque[Sent] = deque()
        self.kv_peak = 0
        self.tally = _Tally()

    def add(self, request: Sent) -> None:
        # A request released into a slot that another freed before its batch ended was released while generate()
        # held this thread; its client, seeing the other end, would have sent it then (this thread learns of it
        # only after the batch): sent at its release, so that its wait for the batch counts in its TTFT. One
        # released at its offset was sent when the client sent it (drive's sender thread, open loop): its send
        # lag is its own.
        freed_slot = request.arrival > request.spec.offset
        self.queue.append(request._replace(sent=request.arrival) if freed_slot else request)

    @property
    def has_work(self) -> bool:
        return bool(self.queue)

    def step(self, until: float | None) -> list[Finished]:
        batch = [self.queue.popleft() for _ in range(min(self.batch_size, len(self.queue)))]
        self.tally.add([s.spec for s in batch], waiting=len(self.queue))
        traces, kv_bytes = self.backend.run_batch(batch, self.clock)
        self.kv_peak = max(self.kv_peak, kv_bytes)
        return [Finished(trace, trace.finished) for trace in traces]

    def kv_figures(self) -> dict[str, Any]:
        return {"kv_cache_peak_bytes": self.kv_peak, "kv_layout": PADDED_LAYOUT}

    def close(self) -> None:
        pass

    def counters(self) -> dict[str, Any]:
        return self.tally.counters()


class _Tally:
    """The forward passes of fixed batches, and how many of their token slots did useful work.

    A batch of B requests left-padded to its longest prompt L runs one prefill pass over B × L
    slots, then one decode pass over B slots per further token up to its longest target T. A
    request of prompt p and target t needs p + t − 1 of those slots (its last token is never fed
    back); the rest are padding, or decoding past its target only to be discarded.
    """

    def __init__(self) -> None:
        self.steps = self.slots = self.useful = self.request_steps = 0
        self.peak_running = self.peak_waiting = 0

    def add(self, batch: list[RequestSpec], waiting: int) -> None:
        rows, longest, steps = len(batch), max(r.prompt_len for r in batch), max(r.target_len for r in batch)
        self.steps += steps
        self.slots += rows * (longest + steps - 1)
        self.useful += sum(r.prompt_len + r.target_len - 1 for r in batch)
        self.request_steps += rows * steps
        self.peak_running = max(self.peak_running, rows)
        self.peak_waiting = max(self.peak_waiting, waiting)  # sent, queued behind this batch

    def counters(self) -> dict[str, Any]:
        no_scheduler = "static batches: generate has no scheduler, so nothing is preempted or cached"
        return round_counters(
            {
                "engine_steps": self.steps,
                "iteration_tokens_total": self.slots,
                "running_request_steps": self.request_steps,
                "wasted_token_slots": self.slots - self.useful,
                "computed_token_slots": self.slots,
                "num_requests_running": self.peak_running,
                "num_requests_waiting": self.peak_waiting,
            },
            {
                "num_preemptions": no_scheduler,
                "prefix_cache_queries": no_scheduler,
                "prefix_cache_hits": no_scheduler,
                "prefix_cache_hit_rate": no_scheduler,
                "kv_cache_usage_perc": "a dense cache sized to each batch: there is no pool to be a fraction of",
                "request_prefill_time_seconds": "generate does not time prefill and decode apart",
                "request_decode_time_seconds": "generate does not time prefill and decode apart",
            },
            "hf-static: counted from the batches given to generate",
        )
