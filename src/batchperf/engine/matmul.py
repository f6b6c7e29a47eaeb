"""The model runner's matmuls on the CPU in float32: oneDNN on prepacked weights, and MKL's packed GEMM for few rows.

- **oneDNN** (every CPU, float32): each weight reordered once into oneDNN's blocked layout
  (``torch.ops.mkldnn._reorder_linear_weight``) and multiplied with ``_linear_pointwise``, as vLLM's CPU engine
  does (``onednn_mm``); the residual adds and the MLP's ``silu(gate) * up`` ride on it as post-ops. ``F.linear``
  goes to MKL, which on this project's AMD CPUs took 1.2-3x longer on prefill shapes (studies/continuous-step).
- **MKL's packed GEMM for few rows** (Intel CPUs only): a decode step multiplies a handful of rows (one per running
  request) by every weight, so each call is a stream of the weight and little else. ``cblas_sgemm_pack``'s layout
  (``torch.ops.mkl._mkl_linear``) is read fastest there: on the project's Intel Xeon a decode step at batch 4-8
  took 0.76-0.83x its time on oneDNN's prepacked weights (which pay a per-call set-up of ~10 us). MKL packs for one
  row count, so :class:`FewRows` packs for the cell's batch size and pads a call with fewer rows up to it (rows
  are independent: the padding changes no other row). MKL runs its slow path on AMD CPUs, so it is used only where
  ``/proc/cpuinfo`` says ``GenuineIntel``.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import NamedTuple

import torch
import torch.nn.functional as F


def prepack_supported(device: torch.device, dtype: torch.dtype) -> bool:
    """oneDNN's prepacked matmul: the CPU in float32 (bfloat16 keeps F.linear, whose sums the bf16 tests pin)."""
    return device.type == "cpu" and dtype == torch.float32 and torch.backends.mkldnn.is_available()


def prepacked(weight: torch.Tensor) -> torch.Tensor:
    """``weight`` [out, in] reordered into oneDNN's blocked layout (an opaque tensor only ``onednn_linear`` reads)."""
    return torch.ops.mkldnn._reorder_linear_weight(weight, None)


def onednn_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear`` on a ``prepacked`` weight."""
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


def onednn_linear_add(residual: torch.Tensor, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``residual + x @ weight.T`` with the add fused into the matmul (the same sums: oneDNN adds after the dot)."""
    return torch.ops.mkldnn._linear_pointwise.binary(x, residual, weight, None, "add")


def onednn_gated(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor) -> torch.Tensor:
    """``silu(x @ w_gate.T) * (x @ w_up.T)`` in two matmuls whose post-ops (oneDNN's swish, then mul) do the rest.

    One matmul over the concatenated weights followed by ``silu`` and ``*`` on its two halves (strided views) took
    1.4-1.7x as long on 128-256 rows, the size of a prompt's prefill step, and 0.98-1.07x on 4-16 decode rows
    (studies/continuous-step).
    """
    gate = torch.ops.mkldnn._linear_pointwise(x, w_gate, None, "swish", [], "")
    return torch.ops.mkldnn._linear_pointwise.binary(x, gate, w_up, None, "mul")


def linear_add(residual: torch.Tensor, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return residual + F.linear(x, weight)


@functools.cache
def cpu_vendor() -> str:
    """The CPU's ``vendor_id`` from ``/proc/cpuinfo`` (``GenuineIntel``, ``AuthenticAMD``); "" where unknown."""
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "vendor_id":
            return value.strip()
    return ""


def few_rows_unsupported(device: torch.device, dtype: torch.dtype) -> str | None:
    """Why MKL's packed GEMM for few rows cannot run here, or None where it can: the CPU in float32, MKL built in,
    an Intel CPU (MKL's fast paths)."""
    if device.type != "cpu" or dtype != torch.float32:
        return f"it runs on the CPU in float32, not {device.type} {dtype}"
    if not torch.backends.mkl.is_available() or not hasattr(torch.ops.mkl, "_mkl_linear"):
        return "this torch is built without MKL"
    vendor = cpu_vendor()
    if vendor != "GenuineIntel":
        return f"it runs on an Intel CPU, not {vendor or 'a CPU of unknown vendor'} (MKL takes its slow path there)"
    return None


def few_rows_supported(device: torch.device, dtype: torch.dtype) -> bool:
    return few_rows_unsupported(device, dtype) is None


class PackedWeight(NamedTuple):
    """One weight in MKL's packed layout, with the weight itself (``_mkl_linear`` reads its shape)."""

    packed: torch.Tensor
    weight: torch.Tensor


class FewRows:
    """Matmuls of at most ``rows`` rows on weights packed by MKL for exactly ``rows``; fewer rows are padded."""

    def __init__(self, rows: int) -> None:
        if rows < 1:
            raise ValueError(f"rows must be >= 1, got {rows}")
        self.rows = rows
        self._pads: dict[tuple[int, torch.dtype], torch.Tensor] = {}  # in-features -> [rows, in] input buffer

    def pack(self, weight: torch.Tensor) -> PackedWeight:
        weight = weight.detach().contiguous()
        return PackedWeight(torch.ops.mkl._mkl_reorder_linear_weight(weight, self.rows), weight)

    def fits(self, x: torch.Tensor) -> bool:
        return x.shape[0] <= self.rows

    def linear(self, x: torch.Tensor, weight: PackedWeight, bias: torch.Tensor | None = None) -> torch.Tensor:
        """``x @ weight.T + bias`` for ``x`` of at most ``rows`` rows (``fits``)."""
        n = x.shape[0]
        if n != self.rows:  # MKL's packed call takes exactly the rows it was packed for
            key = (x.shape[1], x.dtype)
            pad = self._pads.get(key)
            if pad is None:
                pad = self._pads[key] = x.new_zeros(self.rows, x.shape[1])
            pad[:n] = x
            x = pad
        out = torch.ops.mkl._mkl_linear(x, weight.packed, weight.weight, bias, self.rows)
        return out if n == self.rows else out[:n]
