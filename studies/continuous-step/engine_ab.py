"""Two versions of the continuous engine's runner in one process, whole runs interleaved, on the CPU peer cells.

``runner_ab.py`` times a decode step and a prefill of two ``model_runner.py`` files; this times whole runs of the
``continuous`` backend (the suite's workload of each cell, scheduler and all), one backend on this checkout's
runner and one on the runner of another checkout (``OLD``: a ``git worktree`` of an earlier commit), with that
checkout's ``packing``, ``matmul``, ``lanes`` and ``attention`` modules where it has them. Runs alternate, the
first of each pair swapping, after one warm-up run of each; prints each version's fastest run and new/old: the
ratio of the fastest runs and the median of the paired ratios.

    git worktree add /tmp/old <commit>
    OMP_NUM_THREADS=1 PYTHONPATH=src python studies/continuous-step/engine_ab.py /tmp/old [--rounds 7] \
        [--cells 4x256,8x256] [--no-few-rows]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from runner_ab import load_module  # beside this file

ENGINE_MODULES = ("packing", "matmul", "lanes", "attention")  # the runner's own modules, from OLD where it has them


def old_runner_class(old: Path) -> type:
    """OLD's ``ModelRunner``, built against OLD's engine modules (this checkout's stay in ``sys.modules``)."""
    import batchperf.engine.model_runner  # noqa: F401  (this checkout's modules first, so they can be put back)

    engine = old / "src" / "batchperf" / "engine"
    if not (engine / "model_runner.py").is_file():
        raise SystemExit(f"engine_ab: {engine / 'model_runner.py'} not found; OLD is a checkout of this repository")
    saved = {}
    for name in ENGINE_MODULES:
        key = f"batchperf.engine.{name}"
        if (engine / f"{name}.py").is_file():
            saved[key] = sys.modules.get(key)
            sys.modules[key] = load_module(engine / f"{name}.py", f"old_engine_{name}")
    try:
        return load_module(engine / "model_runner.py", "old_engine_model_runner").ModelRunner
    finally:
        for key, module in saved.items():
            if module is None:
                sys.modules.pop(key, None)
            else:
                sys.modules[key] = module


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", type=Path, help="a checkout of the earlier version (e.g. a git worktree)")
    parser.add_argument("--rounds", type=int, default=7, help="runs of each version per cell (default 7)")
    parser.add_argument("--cells", default="4x256,8x256,4x64,8x64", help="batch x prompt, comma-separated")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--no-few-rows", action="store_true",
                        help="both runners without MKL's few-rows path (oneDNN for every matmul: the AMD CPU's path)")
    args = parser.parse_args(argv)

    import torch

    from batchperf.backends.continuous import ContinuousBackend, _eos_ids
    from batchperf.engine.model_runner import ModelRunner
    from batchperf.suite.cell import build_workload
    from batchperf.suite.matrix import TIERS, narrowed
    from batchperf.suite.models import get_model_spec, load_model

    OldRunner = old_runner_class(args.old)
    torch.set_num_threads(1)
    loaded = load_model(get_model_spec("tiny-qwen2"))
    new, old = ContinuousBackend(loaded), ContinuousBackend(loaded)
    few_rows = False if args.no_few_rows else None
    old.runner = OldRunner(loaded.model, old.block_size, suppress_ids=_eos_ids(loaded), few_rows=few_rows)
    if args.no_few_rows:
        new.runner = ModelRunner(loaded.model, new.block_size, suppress_ids=_eos_ids(loaded), few_rows=False)
    print(f"tiny-qwen2, torch threads 1, c{args.concurrency}, {args.rounds} alternating runs of each; old: {args.old}"
          f"{'; no few-rows path' if args.no_few_rows else ''}")
    for text in args.cells.split(","):
        batch, prompt = (int(v) for v in text.split("x"))
        tier = narrowed(TIERS["cpu"], backends="continuous", batch_sizes=str(batch), prompt_lens=str(prompt),
                        concurrency=str(args.concurrency))
        workload = build_workload(tier.cells()[0].resolve(), loaded)
        for backend in (old, new):
            backend.run(workload, batch, args.concurrency)  # warm-up
        times: dict[str, list[float]] = {"old": [], "new": []}
        for r in range(args.rounds):
            for name in (("old", "new") if r % 2 == 0 else ("new", "old")):
                start = time.perf_counter()
                (old if name == "old" else new).run(workload, batch, args.concurrency)
                times[name].append(time.perf_counter() - start)
        paired = statistics.median(n / o for n, o in zip(times["new"], times["old"]))
        print(f"bs{batch} p{prompt}: old best {min(times['old']) * 1e3:.0f} ms, new best {min(times['new']) * 1e3:.0f} "
              f"ms, new/old best {min(times['new']) / min(times['old']):.3f}, median paired {paired:.3f}", flush=True)


if __name__ == "__main__":
    main()
