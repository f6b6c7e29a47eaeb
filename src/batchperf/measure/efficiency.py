"""How close a cell came to the device's physical limits: decode MBU and prefill MFU.

- **Decode MBU** (model bandwidth utilisation): the bytes a decode step must
  read — every weight once, plus the K/V of every key each row attends to —
  over the step's time, as a fraction of the device's peak memory bandwidth.
  gpt-fast reaches about 60% at batch-1 decode; an eager Hugging Face loop far
  less (kernel launches, not bytes, bound a small model).
- **Prefill MFU** (model FLOPs utilisation): the FLOPs of the steps that ran
  prompts — ``2 × parameters`` per token through the layers, the causal
  attention ``QKᵀ`` and ``AV``, one LM-head row per prompt — over those steps'
  time, as a fraction of the device's dense 16-bit peak.

Steps are read back from the raw trace: an in-process backend stamps every
token of one step with the same clock read (after a device synchronisation), so
each distinct token time ends one step. A step that emits a request's *first*
token ran its prompt (a prefill step; it starts when that request was
scheduled, or when the step before ended); a step of later tokens only is a
decode step and starts when the previous step ended. Only useful work counts:
rows a static batch keeps computing past their target are not in the trace.
A prompt split over several steps (chunked prefill) lands on the step that
emitted its first token. Backends whose token times are not one per engine
step (a streaming client, a library's own stamps) get no ratios.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from batchperf.measure.devices import device_peak
from batchperf.measure.trace import RunTrace

# Backends whose every token of one engine step carries that step's one clock read.
STEP_ALIGNED = frozenset({"hf-static", "continuous", "vllm", "vllm-prefix-cache"})


@dataclass(frozen=True, slots=True)
class ModelCost:
    """What a forward pass costs, per token and per step: read off the loaded model."""

    weight_bytes: int  # read once per step: every layer's weights, the final norm, the LM head
    layer_params: int  # matmul parameters of the layers: each token multiplies all of them (2 FLOPs each)
    lm_head_params: int  # vocab × hidden: one row of logits per token sampled
    attn_width: int  # heads × head_dim: each query multiplies this many numbers per key, twice (QKᵀ, AV)
    layers: int
    kv_bytes_per_token: int

    def prefill_flops(self, prompt_len: int) -> float:
        n = prompt_len
        attention = 2 * self.attn_width * n * (n + 1) * self.layers  # causal: query i sees i keys
        return 2 * self.layer_params * n + attention + 2 * self.lm_head_params

    def decode_flops(self, context: int) -> float:
        return 2 * self.layer_params + 4 * self.attn_width * context * self.layers + 2 * self.lm_head_params

    def decode_bytes(self, contexts: list[int]) -> float:
        """Bytes one decode step reads: the weights once, the K/V of every key of every row."""
        return self.weight_bytes + self.kv_bytes_per_token * sum(contexts)


@dataclass(slots=True)
class _Step:
    end: float
    start: float = float("-inf")  # latest admission of a prompt finished in this step
    prompts: list[int] | None = None  # prompt lengths whose first token this step emitted
    contexts: list[int] | None = None  # keys each decode row attended to


def steps_of(trace: RunTrace) -> list[_Step]:
    """The trace's engine steps, in time order (see the module docstring)."""
    steps: dict[float, _Step] = {}
    for r in trace.requests:
        for j, t in enumerate(r.token_times):
            step = steps.setdefault(t, _Step(t, prompts=[], contexts=[]))
            if j == 0:
                step.prompts.append(r.prompt_len)
                step.start = max(step.start, r.scheduled)
            else:  # feeding token j-1 reads the prompt and the j-1 tokens before it, and writes itself
                step.contexts.append(r.prompt_len + j)
    return [steps[t] for t in sorted(steps)]


def efficiency(traces: list[RunTrace], cost: ModelCost, device: str, dtype: str) -> dict[str, Any]:
    """A cell's efficiency section: achieved decode bandwidth and prefill FLOP/s over every measured round, and
    their fractions of ``device``'s peaks when the table (:mod:`batchperf.measure.devices`) has it."""
    peak = device_peak(device)
    out: dict[str, Any] = {
        "device": device,
        "peak_bandwidth_bytes_per_s": peak.bandwidth_bytes_per_s if peak else None,
        "peak_flops_per_s": peak.peak_flops(dtype) if peak else None,
        "peak_source": peak.source if peak else f"no peak figures for {device!r} in batchperf.measure.devices",
    }
    backends = {t.backend for t in traces}
    if not backends <= STEP_ALIGNED:
        return out | {"note": f"{', '.join(sorted(backends))}: token times are not one per engine step; "
                              f"MBU/MFU need an in-process backend ({', '.join(sorted(STEP_ALIGNED))})"}
    read = decode_time = flops = prefill_time = 0.0
    decode_steps = prefill_steps = 0
    for trace in traces:
        previous = float("-inf")
        for step in steps_of(trace):
            if step.prompts:
                start = max(previous, step.start)
                prefill_steps += 1
                prefill_time += step.end - start
                flops += sum(map(cost.prefill_flops, step.prompts)) + sum(map(cost.decode_flops, step.contexts))
            elif previous > float("-inf"):
                decode_steps += 1
                decode_time += step.end - previous
                read += cost.decode_bytes(step.contexts)
            previous = step.end
    bandwidth = read / decode_time if decode_time > 0 else None
    achieved_flops = flops / prefill_time if prefill_time > 0 else None
    return out | {
        "decode_steps": decode_steps,
        "decode_bandwidth_bytes_per_s": bandwidth,
        "decode_mbu": _ratio(bandwidth, out["peak_bandwidth_bytes_per_s"]),
        "prefill_steps": prefill_steps,
        "prefill_flops_per_s": achieved_flops,
        "prefill_mfu": _ratio(achieved_flops, out["peak_flops_per_s"]),
    }


def _ratio(achieved: float | None, peak: float | None) -> float | None:
    return achieved / peak if achieved is not None and peak else None
