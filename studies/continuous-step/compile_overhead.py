"""What ``torch.compile`` costs a call on a decode step's few rows, against the eager ops it would fuse.

Two pieces of the runner's decode step between its matmuls, on the tiny model's shapes (4 rows, hidden 256,
intermediate 1024): the residual add and the next RMSNorm (``x + r``, then ``y / hypot(|y|, floor)``, four eager
ops), and ``silu(gate) * up`` on a gate-up matmul's two halves (two eager ops). Each is timed eager and compiled
(inductor's CPU backend, ``dynamic=False``, compiled and warmed up before timing), best of 5 blocks of 2000 calls.

    OMP_NUM_THREADS=1 PYTHONPATH=src python studies/continuous-step/compile_overhead.py
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def best_us(call: Callable[[], Any], n: int = 2000) -> float:
    """The fastest of 5 blocks of ``n`` calls, after a warm-up: µs a call."""
    for _ in range(200):
        call()
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(n):
            call()
        best = min(best, (time.perf_counter() - start) / n)
    return best * 1e6


def main() -> None:
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(1)
    x, r, floor, gate_up = torch.randn(4, 256), torch.randn(4, 256), torch.tensor(0.1), torch.randn(4, 2048)

    def add_norm(x: torch.Tensor, r: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = x + r
        return y, y / torch.hypot(torch.linalg.vector_norm(y, 2, -1, keepdim=True), floor)

    def gated(g: torch.Tensor) -> torch.Tensor:
        return F.silu(g[:, :1024]) * g[:, 1024:]

    with torch.inference_mode():
        for name, fn, args in (("residual add + RMSNorm", add_norm, (x, r)), ("silu(gate) * up", gated, (gate_up,))):
            start = time.perf_counter()
            compiled = torch.compile(fn, dynamic=False)
            compiled(*args)
            took = time.perf_counter() - start
            print(f"{name}: eager {best_us(lambda: fn(*args)):.1f} us, compiled {best_us(lambda: compiled(*args)):.1f}"
                  f" us a call (compiled in {took:.1f} s)")


if __name__ == "__main__":
    main()
