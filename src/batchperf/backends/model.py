"""What every backend runs on: a loaded Hugging Face model with its config, tokenizer, device and dtype.

The registry of named models (which checkpoint, which tier, the CPU tier's
built tiny model, the shipped configs) is :mod:`batchperf.suite.models`; this
module only loads a local folder (or an already cached hub id: it never goes
to the network) with ``from_pretrained`` and installs the documented slowdown
hook (:mod:`batchperf.backends.inject`) on it. Dummy weights, built from a
config alone, are :mod:`batchperf.backends.dummy`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from batchperf.backends import inject
from batchperf.measure.efficiency import ModelCost
from batchperf.measure.kv import KVShape
from batchperf.measure.weights import WEIGHTS


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A model the suite can load: ``source`` is a hub id, a local path, or ``builtin:tiny-qwen2``."""

    name: str
    source: str
    tier: str
    dtype: str = "float16"
    opt_in: bool = False  # not in the default matrix; ask for it by name
    # "checkpoint": from_pretrained ``source``; "dummy": seeded random weights built from the model's
    # shipped config.json (``source`` then names the public checkpoint that config is of)
    weights: str = "checkpoint"

    def __post_init__(self) -> None:
        if self.weights not in WEIGHTS:
            raise ValueError(f"model {self.name!r}: weights must be one of {', '.join(WEIGHTS)}, not {self.weights!r}")


class ModelLoadError(RuntimeError):
    """A model could not be found or loaded; the message names it and the fix."""


@dataclass(slots=True)
class LoadedModel:
    spec: ModelSpec
    path: Path  # the folder from_pretrained read
    model: Any  # transformers PreTrainedModel, eval mode, on ``device``
    tokenizer: Any  # None for dummy weights: prompts are token ids, and pad/EOS ids come from the config
    config: Any
    device: Any  # torch.device
    dtype: Any  # torch.dtype
    extra: dict[str, Any] = field(default_factory=dict)  # backends may cache state here
    weights: str = "checkpoint"  # or "dummy" (batchperf.backends.dummy): recorded with every cell

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def max_model_len(self) -> int:
        return int(self.config.max_position_embeddings)

    @property
    def vocab_size(self) -> int:
        return int(self.config.vocab_size)

    @property
    def pad_token_id(self) -> int:
        """The id that pads a batch: the tokenizer's pad, else the config's pad, else its (first) EOS, else 0."""
        for value in (getattr(self.tokenizer, "pad_token_id", None), getattr(self.config, "pad_token_id", None),
                      getattr(self.config, "eos_token_id", None)):
            if isinstance(value, (list, tuple)):
                value = value[0] if value else None
            if value is not None:
                return int(value)
        return 0

    def cost(self) -> ModelCost:
        """What a forward pass reads and computes (:mod:`batchperf.measure.efficiency`), from the parameters."""
        embed, head = self.model.get_input_embeddings().weight, self.model.get_output_embeddings().weight
        params = {p.data_ptr(): p for p in self.model.parameters()}
        total = sum(p.numel() * p.element_size() for p in params.values())
        tied = embed.data_ptr() == head.data_ptr()
        # a decode step gathers a few embedding rows but reads the whole LM head (the same matrix when tied)
        read = total - (0 if tied else embed.numel() * embed.element_size())
        matrices = {embed.data_ptr(), head.data_ptr()}
        layers = sum(p.numel() for ptr, p in params.items() if p.dim() == 2 and ptr not in matrices)
        shape = KVShape.from_config(self.config)
        return ModelCost(read, layers, head.numel(), int(self.config.num_attention_heads) * shape.head_dim,
                         shape.layers, shape.bytes_per_token(self.dtype))

    def weight_bytes(self) -> int:
        """Bytes of the model's parameters and buffers on its device (a tied matrix counted once)."""
        tensors = {t.data_ptr(): t for t in (*self.model.parameters(), *self.model.buffers())}
        return sum(t.numel() * t.element_size() for t in tensors.values())


def from_pretrained(spec: ModelSpec, source: Path | str, device: str = "cpu") -> LoadedModel:
    """``from_pretrained`` the model and its tokenizer from ``source`` onto ``device`` in ``spec.dtype``."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # the suite shows its own progress; these bars only clutter the log
    dtype = getattr(torch, spec.dtype)
    try:
        # local_files_only: a folder, or a hub id already in the local cache; never the network.
        # trust_remote_code=False: a folder's own Python (its auto_map) never runs, and transformers never asks
        config = AutoConfig.from_pretrained(source, local_files_only=True, trust_remote_code=False)
        tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=True, trust_remote_code=False)
        model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype, local_files_only=True,
                                                     trust_remote_code=False).to(device).eval()
    except Exception as exc:  # any loader failure becomes one clear message
        raise ModelLoadError(
            f"model {spec.name!r} did not load from {source}: {type(exc).__name__}: {exc}. "
            f"Check the path or hub id (override with --batchperf-model-path {spec.name}=PATH); "
            f"batchperf never downloads: a hub id must already be in the local cache."
        ) from exc
    inject.install(model, device=torch.device(device))  # BATCHPERF_INJECT_*: the documented slowdown hook
    return LoadedModel(spec, Path(str(source)), model, tokenizer, config, torch.device(device), dtype)
