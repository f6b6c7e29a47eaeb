"""The machine's own speed over time: in one process, a fixed interpreter loop (300,000 additions) and 20 batch-4
decode forwards of the tiny model, alternating, each timed, for SECONDS; then the same for a few seconds in fresh
processes (studies/capacity-repeat, "The machine's speed, second by second").

    cd studies/capacity-repeat
    OMP_NUM_THREADS=1 PYTHONPATH=../../src python machine_speed.py run 150 > data/machine-speed/series-1.json
    for i in $(seq 1 10); do OMP_NUM_THREADS=1 PYTHONPATH=../../src python machine_speed.py run 4 \\
        > data/machine-speed/fresh-$i.json; done
    python machine_speed.py summary data/machine-speed/series-1.json data/machine-speed/fresh-*.json

Each row: seconds since the start, the loop's ms, one forward's ms (the mean of 20). Nothing else may run meanwhile.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import time

SLOW_MS = 38.0  # the loop's ms above which a sample is in the slow state (fast ~26 ms, slow ~48 ms on model 1)


def run(seconds: float) -> dict[str, list[tuple[float, float, float]]]:
    import torch
    from transformers import AutoModelForCausalLM

    from batchperf.suite.models import built_model_dir

    torch.set_num_threads(1)
    model = AutoModelForCausalLM.from_pretrained(built_model_dir("tiny-qwen2")).eval()
    ids = torch.randint(0, 1024, (4, 1))
    rows = []
    began = time.perf_counter()
    with torch.inference_mode():
        for _ in range(20):
            model(ids)
        while time.perf_counter() - began < seconds:
            t = time.perf_counter()
            total = 0
            for i in range(300_000):
                total += i
            looped = time.perf_counter()
            for _ in range(20):
                model(ids)
            rows.append((round(t - began, 3), round((looped - t) * 1e3, 2),
                         round((time.perf_counter() - looped) / 20 * 1e3, 3)))
    return {"rows": rows}


def summary(paths: list[str]) -> None:
    for path in paths:
        rows = json.load(open(path))["rows"]
        loop, forward = [r[1] for r in rows], [r[2] for r in rows]
        slow = sum(x > SLOW_MS for x in loop) / len(loop)
        print(f"{path}: {len(rows)} samples over {rows[-1][0]:.0f} s; loop ms median {statistics.median(loop):.1f} "
              f"(p5 {sorted(loop)[len(loop) // 20]:.1f}, p95 {sorted(loop)[-(len(loop) // 20) - 1]:.1f}); forward ms "
              f"median {statistics.median(forward):.2f}; slow state {slow:.1%} of samples")
        if len(rows) < 200:
            continue
        step = rows[-1][0] / len(rows)
        for w in (1, 5, 25, 100):
            means = [statistics.fmean(math.log(x) for x in forward[i:i + w]) for i in range(0, len(forward) - w + 1, w)]
            print(f"  windows of {w} samples (~{w * step:.1f} s): the forward's sd {statistics.pstdev(means):.1%} "
                  f"({len(means)} windows)")
        marks = "".join("#" if x > SLOW_MS else "." for x in loop)
        for i in range(0, len(marks), 100):
            print(f"  {rows[i][0]:6.1f} s {marks[i:i + 100]}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["run"]:
        print(json.dumps(run(float(sys.argv[2]))))
    elif sys.argv[1:2] == ["summary"]:
        summary(sys.argv[2:])
    else:
        raise SystemExit(__doc__)
