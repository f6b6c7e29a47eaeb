"""Peak memory bandwidth and dense 16-bit tensor FLOP/s of the GPUs batchperf knows: the denominators of MBU and MFU.

Every figure is NVIDIA's own datasheet number for the board (the source is
named beside it). Datasheets print 16-bit tensor throughput *with* 2:4
structured sparsity; the dense figure used here is half of it, which is what a
dense matmul can reach. BF16 and FP16 peaks are equal on all of these parts;
no FP32 peak is kept (a float32 cell gets no MFU). A device that is not in the
table (a CPU, a MIG slice, a GPU not listed) gets no ratios, only the achieved
bytes/s and FLOP/s; add a row to compare it against its limit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

DEVICE_TYPES = ("cpu", "cuda")  # the device types a cell runs on (--batchperf-device, CellParams.device)

TB = 1e12
TFLOPS = 1e12


@dataclass(frozen=True, slots=True)
class DevicePeak:
    name: str  # the board, as the datasheet calls it
    bandwidth_bytes_per_s: float  # HBM/GDDR peak
    dense_16bit_flops_per_s: float  # BF16/FP16 tensor core, dense
    source: str

    def peak_flops(self, dtype: str) -> float | None:
        """Peak FLOP/s for a cell in ``dtype`` ("bfloat16", "float16", …); None where the table has none."""
        return self.dense_16bit_flops_per_s if dtype in ("bfloat16", "float16") else None


# (pattern on the CUDA/NVML device name, peak); the first match wins, so the more specific patterns come first.
PEAKS: tuple[tuple[str, DevicePeak], ...] = (
    # NVIDIA H200 Tensor Core GPU datasheet (2024): SXM and NVL both 4.8 TB/s; BF16 1,979 / 1,671 TFLOPS sparse
    (r"H200 NVL", DevicePeak("H200 NVL", 4.8 * TB, 835.5 * TFLOPS, "NVIDIA H200 datasheet")),
    (r"H200", DevicePeak("H200 SXM", 4.8 * TB, 989.5 * TFLOPS, "NVIDIA H200 datasheet")),
    # NVIDIA H100 Tensor Core GPU datasheet: SXM 3.35 TB/s, BF16 1,979 sparse; PCIe 2.0 TB/s, 1,513 sparse;
    # NVL 3.9 TB/s, 1,671 sparse
    (r"H100 NVL", DevicePeak("H100 NVL", 3.9 * TB, 835.5 * TFLOPS, "NVIDIA H100 datasheet")),
    (r"H100.*PCIe", DevicePeak("H100 PCIe", 2.0 * TB, 756.5 * TFLOPS, "NVIDIA H100 datasheet")),
    (r"H100", DevicePeak("H100 SXM", 3.35 * TB, 989.5 * TFLOPS, "NVIDIA H100 datasheet")),
    # NVIDIA A100 Tensor Core GPU datasheet: BF16 312 TFLOPS dense on every board; 80GB SXM 2,039 GB/s,
    # 80GB PCIe 1,935 GB/s, 40GB (SXM and PCIe) 1,555 GB/s
    (r"A100.*(80GB.*PCIe|PCIe.*80GB)", DevicePeak("A100 80GB PCIe", 1.935 * TB, 312 * TFLOPS, "NVIDIA A100 datasheet")),
    (r"A100.*80GB", DevicePeak("A100 80GB SXM", 2.039 * TB, 312 * TFLOPS, "NVIDIA A100 datasheet")),
    (r"A100", DevicePeak("A100 40GB", 1.555 * TB, 312 * TFLOPS, "NVIDIA A100 datasheet")),
    # NVIDIA L40S datasheet: 864 GB/s, BF16 362.05 TFLOPS dense (733 sparse)
    (r"L40S", DevicePeak("L40S", 0.864 * TB, 362.05 * TFLOPS, "NVIDIA L40S datasheet")),
    # NVIDIA L4 datasheet: 300 GB/s, BF16 242 TFLOPS sparse
    (r"\bL4\b", DevicePeak("L4", 0.300 * TB, 121 * TFLOPS, "NVIDIA L4 datasheet")),
    # NVIDIA A10 datasheet: 600 GB/s, BF16 250 TFLOPS sparse
    (r"\bA10\b", DevicePeak("A10", 0.600 * TB, 125 * TFLOPS, "NVIDIA A10 datasheet")),
)


def device_peak(name: str) -> DevicePeak | None:
    """The table's row for a device name (``torch.cuda.get_device_name``/NVML), or None (a MIG slice never matches:
    it has a fraction of the board's bandwidth and compute)."""
    if "MIG" in name:
        return None
    for pattern, peak in PEAKS:
        if re.search(pattern, name):
            return peak
    return None


def device_name(device: Any) -> str:
    """What the device calls itself: the CUDA device name, or ``cpu``."""
    if getattr(device, "type", str(device).split(":")[0]) != "cuda":
        return "cpu"
    import torch

    return str(torch.cuda.get_device_name(device))
