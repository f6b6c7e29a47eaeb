"""How many GPUs a cell may use, and the skip reason when a tensor-parallel cell cannot have them.

A vllm cell with ``tp`` > 1 shards its model over ``tp`` GPUs of this process
(vLLM's ``tensor_parallel_size``). Which GPUs a process sees is set from
outside with ``CUDA_VISIBLE_DEVICES`` (one pytest process per GPU, or per group
of ``tp`` GPUs: see docs/nightly.md), so a cell never shares a GPU with another.
"""

from __future__ import annotations

import os

from batchperf.suite.matrix import Cell


def visible_gpus() -> int:
    """CUDA devices this process may use (``CUDA_VISIBLE_DEVICES`` applied); 0 without CUDA."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def tp_skip_reason(cell: Cell) -> str | None:
    if cell.tp == 1:
        return None
    if cell.params.device != "cuda":
        return f"tensor parallelism (tp={cell.tp}) is measured on GPUs only; the {cell.params.tier} tier runs on CPU"
    have = visible_gpus()
    if have >= cell.tp:
        return None
    pinned = os.environ.get("CUDA_VISIBLE_DEVICES")
    where = f" (CUDA_VISIBLE_DEVICES={pinned})" if pinned is not None else ""
    return (f"tp={cell.tp} needs {cell.tp} GPUs, this process sees {have}{where}; run the tp cells in a process "
            f"pinned to {cell.tp} GPUs, e.g. CUDA_VISIBLE_DEVICES=0,1 pytest -m gpu -k tp{cell.tp}")
