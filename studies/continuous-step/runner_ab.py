"""Two versions of the model runner in one process, interleaved: the time of a decode step and of a prefill.

Loads each given ``model_runner.py`` under its own module name (e.g. main's, from ``git show
main:src/batchperf/engine/model_runner.py > /tmp/old.py``), builds a runner of each on the tiny model, and alternates
16 blocks (40 decode steps of 8 requests with caches of ~64-85 tokens; 10 prefills of a 64-token prompt; or 3
prefills of four 256-token prompts in one step),
so a neighbour's load hits both alike. A runner whose ``allocate`` takes the batch size is told 8 (the decode
step's), as the backend tells it the cell's. Prints each version's best block median and the second's time over the
first's: the best blocks' ratio and the median of the paired ratios.

    OMP_NUM_THREADS=1 PYTHONPATH=src python studies/continuous-step/runner_ab.py /tmp/old.py src/batchperf/engine/model_runner.py
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import statistics
import sys
import time
from pathlib import Path
from typing import Any


def load_module(path: str | Path, name: str) -> Any:
    """The Python file at ``path`` as module ``name`` (in ``sys.modules``)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", help="the first version's model_runner.py (e.g. from git show main:...)")
    parser.add_argument("new", help="the second version's model_runner.py")
    args = parser.parse_args(argv)
    for path in (args.old, args.new):
        if not Path(path).is_file():
            parser.error(f"{path}: no such file; give two model_runner.py files")
    old, new = args.old, args.new
    import torch

    from batchperf.engine.block_manager import BlockManager
    from batchperf.engine.request import Request
    from batchperf.engine.scheduler import Scheduled
    from batchperf.suite.models import get_model_spec, load_model

    torch.set_num_threads(1)
    loaded = load_model(get_model_spec("tiny-qwen2"))

    def setup(module: Any) -> tuple[Any, list[Scheduled], list[Scheduled]]:
        runner = module.ModelRunner(loaded.model, 16, suppress_ids=[int(loaded.config.eos_token_id)])
        if "batch_size" in inspect.signature(runner.allocate).parameters:
            runner.allocate(512, batch_size=8)  # as the backend allocates it: the decode step's batch
        else:
            runner.allocate(512)
        blocks = BlockManager(512, 16, runner.bytes_per_block)
        decode = []
        for i in range(8):
            request = Request(i, tuple(range(1, 64 + 3 * i)), 32)
            blocks.reserve(request, request.num_tokens)
            runner.run([Scheduled.of(request, request.num_tokens)])
            request.num_cached = request.num_tokens
            request.tokens.append(7)
            blocks.reserve(request, request.num_tokens + 1)
            decode.append(Scheduled.of(request, 1))
        prompt = Request(99, tuple(range(1, 65)), 32)
        blocks.reserve(prompt, 64)
        long = [Request(100 + i, tuple(range(1 + i, 257 + i)), 32) for i in range(4)]
        for request in long:
            blocks.reserve(request, 256)
        return runner, decode, [Scheduled.of(prompt, 64)], [Scheduled.of(r, 256) for r in long]

    versions = {"A": setup(load_module(old, "runner_a")), "B": setup(load_module(new, "runner_b"))}

    def block(runner: Any, step: list[Scheduled], n: int) -> float:
        times = []
        for _ in range(n):
            t = time.perf_counter()
            runner.run(step)
            times.append(time.perf_counter() - t)
        return statistics.median(times)

    for kind, index, n in (("decode bs8", 1, 40), ("prefill p64", 2, 10), ("prefill 4 x p256", 3, 3)):
        got: dict[str, list[float]] = {"A": [], "B": []}
        for r in range(16):
            for name in ("AB" if r % 2 == 0 else "BA"):
                got[name].append(block(versions[name][0], versions[name][index], n))
        paired = statistics.median(b / a for a, b in zip(got["A"], got["B"]))
        print(f"{kind}: old {min(got['A']) * 1e3:.3f} ms, new {min(got['B']) * 1e3:.3f} ms; new/old "
              f"{min(got['B']) / min(got['A']):.3f} (best blocks), {paired:.3f} (median paired)")


if __name__ == "__main__":
    main()
