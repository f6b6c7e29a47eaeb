"""Memory figures of a run: torch's peak on CUDA, process RSS on the CPU."""

from __future__ import annotations

import resource
from typing import Any


def reset_peak(device: Any) -> None:
    if getattr(device, "type", "cpu") == "cuda":
        import torch

        torch.cuda.reset_peak_memory_stats(device)


def memory_figures(device: Any) -> dict[str, float]:
    """Bytes: ``peak_rss_bytes`` (process lifetime peak), ``rss_bytes`` now, and torch peaks on CUDA."""
    import psutil

    figures = {
        "rss_bytes": float(psutil.Process().memory_info().rss),
        "peak_rss_bytes": float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024),
    }
    if getattr(device, "type", "cpu") == "cuda":
        import torch

        figures["torch_peak_allocated_bytes"] = float(torch.cuda.max_memory_allocated(device))
        figures["torch_peak_reserved_bytes"] = float(torch.cuda.max_memory_reserved(device))
    return figures
