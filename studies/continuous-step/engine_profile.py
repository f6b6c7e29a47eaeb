"""Where a step of the ``continuous`` engine spends its time, on the CPU peer cells (bs 4/8 x p 64/256 x c 16).

Runs the backend on each cell as the suite does (one warm-up run, then ``--runs`` profiled runs) and splits the
wall time of its steps two ways:

- by phase (wall clock, ``time.perf_counter`` around each part of a step): the torch-free scheduler
  (``schedule`` + ``postprocess``), packing (``PackedStep.build``: lists -> index tensors; and the K/V lanes'
  ``assign`` where the engine has them), the forward pass, the
  LM head and sampling;
- by op (``torch.profiler``, self CPU time of the ops the forward pass runs): matmuls (linear/addmm/mm), attention
  (SDPA and what it calls), KV writes and gathers (index_copy/index_select), elementwise (norms, rotary, act),
  the rest; what no op accounts for is Python and op dispatch.

    OMP_NUM_THREADS=1 PYTHONPATH=src python studies/continuous-step/engine_profile.py [--runs 2] [--cells 4x64,8x256]
"""

from __future__ import annotations

import argparse
import collections
import time
from typing import Any

BUCKETS = (  # op-name fragments -> bucket, first match wins
    ("matmul", ("aten::addmm", "aten::mm", "aten::linear", "aten::matmul", "aten::bmm", "_linear_pointwise",
                "_mkl_linear")),
    ("attention", ("scaled_dot_product", "_flash_attention", "_efficient_attention", "aten::softmax",
                   "aten::_softmax", "aten::baddbmm")),
    ("kv write/gather", ("index_copy", "index_select", "index_put")),
    ("sampling", ("argmax",)),
)


def _bucket(name: str) -> str:
    for bucket, parts in BUCKETS:
        if any(p in name for p in parts):
            return bucket
    return "other ops (norms, rotary, act, views, copies)"


class Timer:
    """Wraps ``obj.attr`` so each call's wall time adds to ``totals[label]``; ``undo`` puts every attribute back
    (a class's own classmethod or function, or an instance's attribute; one only inherited is deleted again)."""

    def __init__(self, totals: dict[str, float]) -> None:
        self.totals = totals
        self._wrapped: list[tuple[Any, str, Any]] = []

    def wrap(self, obj: Any, attr: str, label: str) -> None:
        inner, totals = getattr(obj, attr), self.totals

        def timed(*args: Any, **kwargs: Any) -> Any:
            t = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                totals[label] += time.perf_counter() - t

        self._wrapped.append((obj, attr, vars(obj).get(attr)))
        setattr(obj, attr, timed)

    def undo(self) -> None:
        for obj, attr, before in reversed(self._wrapped):
            if before is None:
                delattr(obj, attr)
            else:
                setattr(obj, attr, before)
        self._wrapped.clear()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2, help="profiled runs per cell (default 2)")
    parser.add_argument("--cells", default="4x64,4x256,8x64,8x256", help="batch x prompt, comma-separated")
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args(argv)

    import torch
    from torch.profiler import ProfilerActivity, profile

    from batchperf.backends.continuous import ContinuousBackend
    from batchperf.engine import packing

    try:
        from batchperf.engine import lanes
    except ImportError:  # an engine from before the lanes
        lanes = None
    from batchperf.engine.scheduler import Scheduler
    from batchperf.suite.cell import build_workload
    from batchperf.suite.matrix import TIERS, narrowed
    from batchperf.suite.models import get_model_spec, load_model

    loaded = load_model(get_model_spec("tiny-qwen2"))
    print(f"tiny-qwen2, torch threads {torch.get_num_threads()}, {args.runs} runs per cell, c{args.concurrency}")
    header = ("cell", "step ms", "sched", "pack", "forward", "head+sample", "engine rest")
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join(["---"] + ["--:"] * (len(header) - 1)) + "|")
    op_rows = []
    for text in args.cells.split(","):
        batch, prompt = (int(v) for v in text.split("x"))
        tier = narrowed(TIERS["cpu"], backends="continuous", batch_sizes=str(batch), prompt_lens=str(prompt),
                        concurrency=str(args.concurrency))
        workload = build_workload(tier.cells()[0].resolve(), loaded)  # the suite's workload of this cell
        backend = ContinuousBackend(loaded)
        backend.run(workload, batch, args.concurrency)  # warm-up
        totals: dict[str, float] = collections.defaultdict(float)
        timer = Timer(totals)
        runner = backend.runner
        timer.wrap(runner, "run", "runner.run")
        timer.wrap(runner, "_forward", "forward")
        timer.wrap(packing.PackedStep, "build", "pack")
        if lanes is not None:  # the K/V lanes' bookkeeping is part of packing a step (engines since issue 40's s5)
            timer.wrap(lanes.KVLanes, "assign", "pack")
        timer.wrap(Scheduler, "schedule", "sched")
        timer.wrap(Scheduler, "postprocess", "sched")
        steps = 0
        try:
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                t0 = time.perf_counter()
                for _ in range(args.runs):
                    trace = backend.run(workload, batch, args.concurrency)
                    steps += int(trace.counters["engine_steps"])
                wall = time.perf_counter() - t0
        finally:
            timer.undo()
        # runner.run = pack + forward + head/sample; the rest of a step is the engine and the feed
        head = totals["runner.run"] - totals["pack"] - totals["forward"]
        rest = wall - totals["runner.run"] - totals["sched"]
        per = 1e3 / max(steps, 1)
        print(f"| bs{batch} p{prompt} | {wall * per:.2f} | {totals['sched'] * per:.2f} | {totals['pack'] * per:.2f} | "
              f"{totals['forward'] * per:.2f} | {head * per:.2f} | {rest * per:.2f} |")
        by_bucket: dict[str, float] = collections.defaultdict(float)
        for event in prof.key_averages():
            if event.key.startswith(("aten::", "mkldnn::", "mkl::")) or "attention" in event.key:
                by_bucket[_bucket(event.key)] += event.self_cpu_time_total / 1e6
        ops = sum(by_bucket.values())
        by_bucket["python + dispatch (forward - ops)"] = max(totals["forward"] + head + totals["pack"] - ops, 0.0)
        op_rows.append((f"bs{batch} p{prompt}", {k: v * per for k, v in by_bucket.items()}))
    names = sorted({k for _, row in op_rows for k in row})
    print()
    print("| cell | " + " | ".join(names) + " |")
    print("|---|" + "|".join(["--:"] * len(names)) + "|")
    for cell, row in op_rows:
        print(f"| {cell} | " + " | ".join(f"{row.get(n, 0.0):.2f}" for n in names) + " |")


if __name__ == "__main__":
    main()
