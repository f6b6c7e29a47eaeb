"""Named models: the GPU tier's architectures from shipped configs, a built tiny model for the CPU tier.

The GPU tier's models are public architectures whose ``config.json`` ships in
this package (``configs/<name>/config.json``, copied verbatim from the hub).
Without ``--batchperf-model-path NAME=PATH`` they get dummy weights
(:mod:`batchperf.backends.dummy`: seeded random weights made on the device);
with it, the checkpoint at PATH is loaded. Nothing here ever reaches a hub.

The CPU tier's model is a random-weight Qwen2 model built from a fixed config
and seed, saved with ``save_pretrained`` (with a byte-level BPE tokenizer
trained offline on a synthetic corpus) into a cache folder, and loaded back
with ``from_pretrained``: the same loading path as a real checkpoint, no hub.
``small-qwen2`` (opt-in: no tier runs it unless named) is built the same way
from a wider recipe: each builtin model is one BuiltRecipe in BUILT.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from batchperf.backends.dummy import build_dummy
from batchperf.backends.model import LoadedModel, ModelLoadError, ModelSpec, from_pretrained
from batchperf.launch.environ import cache_root

BUILTIN = "builtin:"  # a source naming a model built here from BUILT


@dataclass(frozen=True, slots=True)
class BuiltRecipe:
    """How a builtin model is built: a Qwen2 config (all but the vocabulary), the tokenizer's vocabulary size,
    a seed for the weights and the corpus, and a version to bump when the recipe changes (the cache folder's
    name follows it)."""

    config: dict[str, Any]
    vocab: int
    seed: int
    version: int


TINY_CONFIG: dict[str, Any] = {
    # Sized so a decode step's matmuls, not Python, take most of the step on 2 cores.
    "hidden_size": 256,
    "intermediate_size": 1024,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,  # grouped-query attention, like Qwen2.5
    "max_position_embeddings": 4096,
    "rope_theta": 10000.0,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": True,
}
TINY_VOCAB = 1024
TINY_SEED = 1234
TINY_VERSION = 1  # bump when the recipe changes: the cache folder name follows

# Wider, with fewer layers and an 8k vocabulary (its lm_head a quarter of the weights), so a decode step's time
# grows with the batch on one CPU core (studies/policies/README.md): 8-15 ms at 1 request, 2.4-3.6x that at 16.
SMALL_CONFIG: dict[str, Any] = {
    **TINY_CONFIG,
    "hidden_size": 768,
    "intermediate_size": 3072,
    "num_hidden_layers": 2,
    "num_attention_heads": 12,
}
SMALL_VOCAB = 8192

BUILT: dict[str, BuiltRecipe] = {
    "tiny-qwen2": BuiltRecipe(TINY_CONFIG, TINY_VOCAB, TINY_SEED, TINY_VERSION),
    "small-qwen2": BuiltRecipe(SMALL_CONFIG, SMALL_VOCAB, TINY_SEED, 1),
}


MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec("tiny-qwen2", "builtin:tiny-qwen2", tier="cpu", dtype="float32"),
        # the policy study's CPU model whose step grows with the batch; no tier runs it unless named
        ModelSpec("small-qwen2", "builtin:small-qwen2", tier="cpu", dtype="float32", opt_in=True),
        # source: the public checkpoint whose config.json ships in configs/<name>/
        ModelSpec("qwen2.5-0.5b", "Qwen/Qwen2.5-0.5B-Instruct", tier="gpu", dtype="bfloat16", weights="dummy"),
        ModelSpec("qwen2.5-1.5b", "Qwen/Qwen2.5-1.5B-Instruct", tier="gpu", dtype="bfloat16", weights="dummy"),
        # an explicit head_dim (128, not hidden / heads = 64) and per-head q/k norms
        ModelSpec("qwen3-0.6b", "Qwen/Qwen3-0.6B", tier="gpu", dtype="bfloat16", opt_in=True, weights="dummy"),
        ModelSpec("llama-2-7b", "meta-llama/Llama-2-7b-hf", tier="gpu", dtype="float16", opt_in=True,
                  weights="dummy"),
    )
}

CONFIGS = Path(__file__).parent / "configs"


def shipped_config_dir(name: str) -> Path:
    """The folder holding model ``name``'s shipped ``config.json``; ModelLoadError if there is none."""
    folder = CONFIGS / name
    if not (folder / "config.json").is_file():
        shipped = sorted(p.name for p in CONFIGS.iterdir() if (p / "config.json").is_file())
        raise ModelLoadError(f"model {name!r} has no shipped config ({folder / 'config.json'} is missing; shipped: "
                             f"{', '.join(shipped)}); give a checkpoint with --batchperf-model-path {name}=PATH")
    return folder


# Where a config was read from and which library wrote it say nothing about the model.
_NOT_IDENTITY = ("_name_or_path", "transformers_version", "_commit_hash")


def config_hash(config: Any) -> str:
    """A short stable hash of a model config (its JSON, keys sorted, without its path or writer's version)."""
    data = config.to_dict() if hasattr(config, "to_dict") else dict(config)
    data = {k: v for k, v in data.items() if k not in _NOT_IDENTITY}
    blob = json.dumps(data, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def get_model_spec(name: str, overrides: dict[str, str] | None = None) -> ModelSpec:
    """The registered model ``name``, its source replaced by ``overrides[name]`` if given."""
    overrides = overrides or {}
    spec = MODELS.get(name)
    if spec is None:
        if name in overrides:  # a model known only from the command line
            return ModelSpec(name, overrides[name], tier="gpu")
        raise ValueError(f"unknown model {name!r}; known models: {', '.join(MODELS)} "
                         f"(or give one as --batchperf-model-path {name}=PATH)")
    if name in overrides:  # a checkpoint given: load it, never dummy weights
        return ModelSpec(spec.name, overrides[name], spec.tier, spec.dtype, spec.opt_in)
    return spec


def built_model_dir(name: str, root: Path | None = None) -> Path:
    """Build the builtin model ``name`` (a key of BUILT) once, atomically, and return its folder."""
    recipe = BUILT.get(name)
    if recipe is None:
        raise ModelLoadError(f"no builtin model {name!r}; builtin models: {', '.join(BUILT)}")
    target = (root or cache_root()) / "models" / f"{name}-v{recipe.version}"
    if (target / "config.json").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=target.parent))
    try:
        _build(recipe, staging)
        try:
            staging.rename(target)
        except OSError:  # another process won the race; its copy is identical
            if not (target / "config.json").exists():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _synthetic_corpus(n_lines: int = 4000, seed: int = TINY_SEED) -> list[str]:
    import numpy as np

    rng = np.random.Generator(np.random.PCG64(seed))
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words = ["".join(rng.choice(letters, size=rng.integers(2, 9))) for _ in range(3000)]
    return [" ".join(rng.choice(words, size=rng.integers(5, 20))) for _ in range(n_lines)]


def _build(recipe: BuiltRecipe, folder: Path) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=recipe.vocab,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(_synthetic_corpus(seed=recipe.seed), trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    tokenizer.save_pretrained(folder)

    eos = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    config = Qwen2Config(vocab_size=len(tokenizer), bos_token_id=eos, eos_token_id=eos, pad_token_id=eos,
                         **recipe.config)
    torch.manual_seed(recipe.seed)
    model = Qwen2ForCausalLM(config)
    model.save_pretrained(folder)


def resolve_source(spec: ModelSpec) -> Path | str:
    if spec.source.startswith(BUILTIN):
        return built_model_dir(spec.source.removeprefix(BUILTIN))
    return spec.source


def load_model(spec: ModelSpec, device: str = "cpu") -> LoadedModel:
    """The registered model ``spec`` on ``device``: dummy weights from its shipped config, or its checkpoint
    (the CPU tier's tiny model is built first if needed)."""
    if spec.weights == "dummy":
        return build_dummy(spec, shipped_config_dir(spec.name), device)
    return from_pretrained(spec, resolve_source(spec), device)
