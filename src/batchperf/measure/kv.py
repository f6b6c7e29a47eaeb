"""KV-cache accounting from a model config: bytes per token and per request.

Per token, every layer stores one key and one value vector per KV head:
``2 × layers × kv_heads × head_dim × dtype_bytes``. Grouped-query attention
(``num_key_value_heads`` < ``num_attention_heads``) and an explicit
``head_dim`` are honoured. (The study's ``2 × seq_len × hidden × 2 × dtype``
ignores both the layer count and GQA; it is wrong for every modern model.)
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from batchperf.measure.trace import RunTrace

DTYPE_BYTES: dict[str, int] = {
    "float32": 4, "fp32": 4, "float": 4,
    "float16": 2, "fp16": 2, "half": 2, "bfloat16": 2, "bf16": 2,
    "float8": 1, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "int8": 1,
}

# hf-static's KV layout: every request of a batch holds the batch's longest prompt and output (left padding)
PADDED_LAYOUT = "dense, padded to the batch"


def depends_on_arrivals(kv: Mapping[str, Any], open_loop: bool) -> str | None:
    """Why a cell's padded figures (the KV bytes a request held, its padding waste) depend on when its requests
    arrived, or None when they do not.

    Under a padded layout a request holds its batch's longest prompt and output, so those figures depend on which
    requests shared a batch; under open-loop arrivals (a trace, a request rate, tenants) a static batcher forms its
    batches from what has arrived, which moves with the process's speed (measured on the CPU tier's hf-static
    trace cell: 1,262,933 B a request and padding waste 0.0323 in one process, 1,272,149 B and 0.0358 in another
    with a 30% injected slowdown). Closed-loop batches form in request order whatever the speed, and paged layouts
    hold a request's own tokens only."""
    if kv.get("kv_layout") != PADDED_LAYOUT or not open_loop:
        return None
    return ("depends on arrival timing: each request is padded to the batch it joined, and under open-loop arrivals "
            "which requests share a batch moves with the process's speed; reported, not gated")


def dtype_bytes(dtype: Any) -> int:
    """Bytes per element of a dtype name (``"float16"``) or a torch dtype."""
    if hasattr(dtype, "itemsize"):  # torch.dtype
        return int(dtype.itemsize)
    name = str(dtype).removeprefix("torch.").lower()
    if name not in DTYPE_BYTES:
        raise ValueError(f"unknown dtype {dtype!r}; known: {', '.join(sorted(DTYPE_BYTES))}")
    return DTYPE_BYTES[name]


def _field(config: Mapping[str, Any] | Any, name: str) -> Any:
    return config.get(name) if isinstance(config, Mapping) else getattr(config, name, None)


@dataclass(frozen=True, slots=True)
class KVShape:
    layers: int
    kv_heads: int
    head_dim: int

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | Any) -> KVShape:
        """From a Hugging Face config object or its ``config.json`` dict (text_config honoured)."""
        text = _field(config, "text_config")
        if text is not None:
            config = text
        layers = _field(config, "num_hidden_layers")
        heads = _field(config, "num_attention_heads")
        hidden = _field(config, "hidden_size")
        if layers is None or heads is None:
            raise ValueError("config has no num_hidden_layers / num_attention_heads: not a decoder LLM config")
        kv_heads = _field(config, "num_key_value_heads") or heads
        head_dim = _field(config, "head_dim")
        sizes = {"num_hidden_layers": layers, "num_attention_heads": heads, "num_key_value_heads": kv_heads}
        sizes |= {"head_dim": head_dim} if head_dim is not None else {"hidden_size": hidden}
        for key, value in sizes.items():  # a negative size would print negative bytes as if they were real
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"config {key} is {value!r}: must be a whole number >= 1")
        if head_dim is None:
            if hidden is None:
                raise ValueError("config has neither head_dim nor hidden_size")
            head_dim = hidden // heads
        return cls(int(layers), int(kv_heads), int(head_dim))

    def bytes_per_token(self, dtype: Any) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * dtype_bytes(dtype)


def kv_bytes_per_token(config: Mapping[str, Any] | Any, dtype: Any) -> int:
    return KVShape.from_config(config).bytes_per_token(dtype)


def kv_bytes_per_request(config: Mapping[str, Any] | Any, dtype: Any, prompt_len: int, output_len: int) -> int:
    """K/V bytes for a request whose prompt and output tokens are all held.

    A backend that never writes the last sampled token's K/V holds one token
    fewer; see :func:`kv_tokens_held`.
    """
    if prompt_len < 0 or output_len < 0:
        raise ValueError(f"prompt_len and output_len must be >= 0, got {prompt_len}, {output_len}")
    return kv_bytes_per_token(config, dtype) * (prompt_len + output_len)


def kv_tokens_held(prompt_len: int, output_len: int) -> int:
    """Tokens whose K/V exist after generating ``output_len`` tokens: the last one is never fed back."""
    return prompt_len + max(output_len - 1, 0)


def kv_figures(traces: list[RunTrace], config: Mapping[str, Any] | Any, dtype: Any) -> dict[str, Any]:
    """A cell's KV figures: analytic bytes per token and per request, the backend's own figures, and the
    measured bytes and tokens it held per request (of the last round)."""
    last = traces[-1]
    held = [r for r in last.requests if r.kv_bytes is not None and r.kv_tokens]
    figures: dict[str, Any] = {
        "bytes_per_token_analytic": kv_bytes_per_token(config, dtype),
        "kv_bytes_per_request_analytic_mean": statistics.fmean(
            kv_bytes_per_request(config, dtype, r.prompt_len, r.output_len) for r in last.requests),
        **last.kv,
    }
    if held:
        figures["bytes_per_token_measured"] = sum(r.kv_bytes for r in held) / sum(r.kv_tokens for r in held)
        figures["kv_bytes_per_request_mean"] = statistics.fmean(r.kv_bytes for r in held)
        figures["kv_tokens_per_request_mean"] = statistics.fmean(r.kv_tokens for r in held)
    return figures
