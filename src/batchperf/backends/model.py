"""What every backend runs on: a loaded Hugging Face model with its config, tokenizer, device and dtype.

The registry of named models (which checkpoint, which tier, the CPU tier's
built tiny model) is :mod:`batchperf.suite.models`; this module only loads a
folder or hub id with ``from_pretrained`` and installs the documented
slowdown hook (:mod:`batchperf.measure.inject`) on it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from batchperf.measure import inject


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A model the suite can load: ``source`` is a hub id, a local path, or ``builtin:tiny-qwen2``."""

    name: str
    source: str
    tier: str
    dtype: str = "float16"
    opt_in: bool = False  # not in the default matrix; ask for it by name


class ModelLoadError(RuntimeError):
    """A model could not be found or loaded; the message names it and the fix."""


@dataclass(slots=True)
class LoadedModel:
    spec: ModelSpec
    path: Path  # the folder from_pretrained read
    model: Any  # transformers PreTrainedModel, eval mode, on ``device``
    tokenizer: Any
    config: Any
    device: Any  # torch.device
    dtype: Any  # torch.dtype
    extra: dict[str, Any] = field(default_factory=dict)  # backends may cache state here

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def max_model_len(self) -> int:
        return int(self.config.max_position_embeddings)

    @property
    def vocab_size(self) -> int:
        return int(self.config.vocab_size)


def from_pretrained(spec: ModelSpec, source: Path | str, device: str = "cpu") -> LoadedModel:
    """``from_pretrained`` the model and its tokenizer from ``source`` onto ``device`` in ``spec.dtype``."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # the suite shows its own progress; these bars only clutter the log
    dtype = getattr(torch, spec.dtype)
    try:
        config = AutoConfig.from_pretrained(source)
        tokenizer = AutoTokenizer.from_pretrained(source)
        model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype).to(device).eval()
    except Exception as exc:  # any loader failure becomes one clear message
        raise ModelLoadError(
            f"model {spec.name!r} did not load from {source}: {type(exc).__name__}: {exc}. "
            f"Check the path or hub id (override with --batchperf-model-path {spec.name}=PATH); "
            f"this machine has no hub access, so a hub id must already be in the local cache."
        ) from exc
    inject.install(model, device=torch.device(device))  # BATCHPERF_INJECT_*: the documented slowdown hook
    return LoadedModel(spec, Path(str(source)), model, tokenizer, config, torch.device(device), dtype)
