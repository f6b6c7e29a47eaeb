"""What bounds ``continuous`` against vLLM on the CPU peer cells: its matmuls and attention, timed within whole runs.

Runs both backends in one process on each peer cell (bs 4/8 x p 64/256 x c 16, the suite's workload), interleaved,
``--rounds`` runs each after one warm-up. For ``continuous`` it times, inside the same runs, every matmul call
(oneDNN's, MKL's packed GEMM, ``F.linear``) and every attention call (the decode rows' KV gathers and SDPA, each
prompt's SDPA), with ``time.perf_counter`` around the calls (about 0.3 us a call, ~2 ms a run). It prints, from
each backend's fastest run: the run's time, the matmul and attention time in it, the rest, vLLM's run time, and
vLLM's time / 1.2, the time continuous must reach to be 1.2x vLLM's output tok/s (the runs generate the same
tokens).

    OMP_NUM_THREADS=1 PYTHONPATH=src .venv-vllm-0.32.0/bin/python studies/continuous-step/bound.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import collections
import time
from typing import Any

from engine_profile import Timer  # beside this file

CELLS = ((4, 64), (4, 256), (8, 64), (8, 256))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="runs of each backend per cell (default 5)")
    args = parser.parse_args(argv)

    import torch

    from batchperf.backends.continuous import ContinuousBackend
    from batchperf.backends.vllm_engine import VLLMEngineBackend
    from batchperf.engine import model_runner
    from batchperf.suite.cell import build_workload
    from batchperf.suite.matrix import TIERS, narrowed
    from batchperf.suite.models import get_model_spec, load_model

    torch.set_num_threads(1)
    loaded = load_model(get_model_spec("tiny-qwen2"))
    ours, vllm = ContinuousBackend(loaded), VLLMEngineBackend(loaded)
    runner = ours.runner
    print(f"tiny-qwen2, torch threads 1, best of {args.rounds} interleaved runs per backend; ms per run")
    print("| cell | continuous run | matmuls | attention | rest | vLLM run | vLLM / 1.2 | matmuls + attention "
          "over vLLM / 1.2 |")
    print("|---|--:|--:|--:|--:|--:|--:|--:|")
    for batch, prompt in CELLS:
        tier = narrowed(TIERS["cpu"], backends="continuous", batch_sizes=str(batch), prompt_lens=str(prompt),
                        concurrency="16")
        workload = build_workload(tier.cells()[0].resolve(), loaded)
        ours.run(workload, batch, 16)
        vllm.run(workload, batch, 16)
        best: dict[str, Any] = {}
        for r in range(args.rounds):
            for name in (("ours", "vllm") if r % 2 == 0 else ("vllm", "ours")):
                totals: dict[str, float] = collections.defaultdict(float)
                timed = Timer(totals)
                if name == "ours":  # the runner's matmul entry points and its attention
                    attention = "attention" if hasattr(runner, "attention") else "_attention"  # (before: a method)
                    for attr in ("linear", "linear_add", attention):
                        timed.wrap(runner, attr, "attention" if attr == attention else "matmul")
                    gated = "onednn_gated" if hasattr(model_runner, "onednn_gated") else "_onednn_gated"  # (before)
                    timed.wrap(model_runner, gated, "matmul")
                    if getattr(runner, "few", None) is not None:  # (not in engines before it)
                        timed.wrap(runner.few, "linear", "matmul")
                start = time.perf_counter()
                try:
                    (ours if name == "ours" else vllm).run(workload, batch, 16)
                finally:
                    wall = time.perf_counter() - start
                    timed.undo()
                if name not in best or wall < best[name][0]:
                    best[name] = (wall, dict(totals))
        wall, parts = best["ours"]
        budget = best["vllm"][0] / 1.2
        mm, attn = parts.get("matmul", 0.0), parts.get("attention", 0.0)
        print(f"| bs{batch} p{prompt} | {wall * 1e3:.0f} | {mm * 1e3:.0f} | {attn * 1e3:.0f} | "
              f"{(wall - mm - attn) * 1e3:.0f} | {best['vllm'][0] * 1e3:.0f} | {budget * 1e3:.0f} | "
              f"{(mm + attn) / budget:.2f} |", flush=True)
    vllm.close()


if __name__ == "__main__":
    main()
