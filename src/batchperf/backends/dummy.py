"""Dummy weights: a model built from its ``config.json`` alone, with seeded random weights, on its device.

How fast a model serves does not depend on its weights' values, only on its
architecture, dtype and device; so the GPU tier measures the real architectures
without downloading a checkpoint, as vLLM's ``--load-format dummy`` does. The
model is constructed inside ``torch.device(device)`` in the target dtype: every
parameter is allocated and initialised (transformers' own ``_init_weights``,
normal with the config's ``initializer_range``) where it will live, with no CPU
copy and no save/load round trip — seconds for a 1.5B model on a GPU, about ten
for Qwen2.5-0.5B on one CPU thread.

No tokenizer: prompts are token ids, and the pad and EOS ids a backend needs
come from the config (:attr:`LoadedModel.pad_token_id`, the model's generation
config). The seed is fixed, so two builds on the same device are identical;
outputs are meaningless text, which no batchperf metric reads.
"""

from __future__ import annotations

from pathlib import Path

from batchperf.backends import inject
from batchperf.backends.model import LoadedModel, ModelLoadError, ModelSpec

DUMMY_SEED = 0


def build_dummy(spec: ModelSpec, folder: Path, device: str = "cpu", seed: int = DUMMY_SEED) -> LoadedModel:
    """``spec``'s architecture from ``folder/config.json``, random weights (``seed``) made on ``device`` in ``spec.dtype``."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    target = torch.device(device)
    dtype = getattr(torch, spec.dtype)
    try:
        # trust_remote_code=False: a config's auto_map code never runs, and transformers never asks
        config = AutoConfig.from_pretrained(folder, local_files_only=True, trust_remote_code=False)
        # the caller's random state is left as it was: only this build is seeded
        cuda = [target.index if target.index is not None else torch.cuda.current_device()] if target.type == "cuda" else []
        with torch.random.fork_rng(devices=cuda):
            torch.manual_seed(seed)
            with target:  # parameters are created, and initialised, on the device
                model = AutoModelForCausalLM.from_config(config, dtype=dtype, trust_remote_code=False)
    except Exception as exc:  # a bad config, an unknown architecture, out of memory: one clear message
        raise ModelLoadError(
            f"model {spec.name!r}: dummy weights could not be built from {folder / 'config.json'}: "
            f"{type(exc).__name__}: {exc}. Check that file (or give a checkpoint with "
            f"--batchperf-model-path {spec.name}=PATH)"
        ) from exc
    model.eval()
    inject.install(model, device=target)  # BATCHPERF_INJECT_*: the documented slowdown hook, as for a checkpoint
    return LoadedModel(spec, Path(folder), model, None, config, target, dtype, weights="dummy")
