"""MKL's packed GEMM for few rows against oneDNN's prepacked matmul, on this CPU, at the tiny model's decode shapes.

The engine uses MKL's packed GEMM (``batchperf.engine.matmul.FewRows``) for decode steps on Intel CPUs only, on the
ground that MKL takes its slow path on AMD. This times both, per weight shape of tiny-qwen2 (hidden 256, QKV 384,
MLP 1024, vocabulary 1024) at 4 and 8 rows, one thread: ``--calls`` calls a repetition, the best of ``--reps``,
interleaved, so the answer is this machine's, not the vendor's.

    OMP_NUM_THREADS=1 PYTHONPATH=src python studies/continuous-step/few_rows_amd.py
"""

from __future__ import annotations

import argparse
import time

import torch

from batchperf.engine.matmul import FewRows, cpu_vendor, onednn_linear, prepacked

SHAPES = {"qkv": (384, 256), "o": (256, 256), "gate/up": (1024, 256), "down": (256, 1024), "lm head": (1024, 256)}


def timed(fn, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    print(f"vendor {cpu_vendor()}, torch {torch.__version__}, MKL {torch.backends.mkl.is_available()}")
    print("| weight [out, in] | rows | oneDNN prepacked µs | MKL packed µs | MKL / oneDNN |")
    print("|---|--:|--:|--:|--:|")
    total = {4: [0.0, 0.0], 8: [0.0, 0.0]}
    for name, (out, inp) in SHAPES.items():
        w = torch.randn(out, inp) * 0.02
        packed_dnn = prepacked(w)
        for rows in (4, 8):
            few = FewRows(rows)
            packed_mkl = few.pack(w)
            x = torch.randn(rows, inp)
            assert torch.allclose(onednn_linear(x, packed_dnn), few.linear(x, packed_mkl), atol=1e-4)
            best = [float("inf"), float("inf")]
            for _ in range(args.reps):
                best[0] = min(best[0], timed(lambda: onednn_linear(x, packed_dnn), args.calls))
                best[1] = min(best[1], timed(lambda: few.linear(x, packed_mkl), args.calls))
            total[rows][0] += best[0] * (4 if name not in ("lm head",) else 1) * (2 if name == "gate/up" else 1)
            total[rows][1] += best[1] * (4 if name not in ("lm head",) else 1) * (2 if name == "gate/up" else 1)
            print(f"| {name} [{out}, {inp}] | {rows} | {best[0]:.1f} | {best[1]:.1f} | {best[1] / best[0]:.2f} |")
    for rows, (dnn, mkl) in total.items():
        print(f"a decode step's matmuls at {rows} rows (4 layers: qkv, o, gate, up, down; the head): "
              f"oneDNN {dnn:.0f} µs, MKL {mkl:.0f} µs, MKL / oneDNN {mkl / dnn:.2f}")


if __name__ == "__main__":
    main()
