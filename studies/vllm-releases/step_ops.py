"""Which ops a vLLM engine step spends its CPU time on, in one environment: run it in each release's virtualenv and
compare, to say which part of the engine an upgrade moved.

    OMP_NUM_THREADS=1 .venv-vllm-0.27.1/bin/python studies/vllm-releases/step_ops.py --out ops-0.27.1.json
    OMP_NUM_THREADS=1 .venv-vllm-0.28.0/bin/python studies/vllm-releases/step_ops.py --out ops-0.28.0.json
    python studies/vllm-releases/step_ops.py --compare ops-0.27.1.json ops-0.28.0.json

Runs the in-process ``vllm`` backend on the chain's engine cell (bs 4, p 64, c 16: the suite's own workload of
that cell, ``batchperf.suite.cell.build_workload``) as the suite does: one warm-up run, then ``--runs`` runs under
``torch.profiler`` (CPU). Per engine step (vLLM's own count) it keeps the wall time and each op's self CPU time:
torch's ``aten::`` ops, vLLM's compiled ``_C`` kernels and every other op the profiler names. ``--compare`` prints
the ops whose time per step moved most between two such files, and the time no op accounts for (Python, the
scheduler, dispatch). The profiler's own overhead is in both, the same; compare files made on one machine, close
in time (this VM's speed drifts), and repeat each side to see the run-to-run spread.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from pathlib import Path


def measure(runs: int, cell: str) -> dict[str, object]:
    import torch
    import vllm
    from torch.profiler import ProfilerActivity, profile

    from batchperf.backends import create_backend
    from batchperf.suite.cell import build_workload
    from batchperf.suite.matrix import TIERS, narrowed
    from batchperf.suite.models import get_model_spec, load_model

    batch, prompt, conc = (int(v) for v in cell.split("x"))
    loaded = load_model(get_model_spec("tiny-qwen2"))
    tier = narrowed(TIERS["cpu"], backends="vllm", batch_sizes=str(batch), prompt_lens=str(prompt),
                    concurrency=str(conc))
    workload = build_workload(tier.cells()[0].resolve(), loaded)
    backend = create_backend("vllm", loaded)
    try:
        backend.run(workload, batch, conc)  # warm-up: the engine's build and its first steps
        steps, tokens = 0, 0
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            start = time.perf_counter()
            for _ in range(runs):
                trace = backend.run(workload, batch, conc)
                steps += int(trace.counters["engine_steps"])
                tokens += sum(len(r.token_times) for r in trace.requests)
            wall = time.perf_counter() - start
    finally:
        backend.close()
    ops: dict[str, float] = collections.defaultdict(float)
    for event in prof.key_averages():
        ops[event.key] += event.self_cpu_time_total / 1e6
    return {"vllm": vllm.__version__, "torch": torch.__version__, "cell": cell, "runs": runs, "steps": steps,
            "tokens": tokens, "wall_s": wall, "ops_self_cpu_s": dict(ops)}


def compare(a_path: Path, b_path: Path, top: int) -> str:
    a, b = (json.loads(p.read_text(encoding="utf-8")) for p in (a_path, b_path))
    per = {k: 1e3 / d["steps"] for k, d in (("a", a), ("b", b))}  # seconds -> ms per step
    rows = []
    names = set(a["ops_self_cpu_s"]) | set(b["ops_self_cpu_s"])
    for name in names:
        ta, tb = a["ops_self_cpu_s"].get(name, 0.0) * per["a"], b["ops_self_cpu_s"].get(name, 0.0) * per["b"]
        rows.append((tb - ta, name, ta, tb))
    rows.sort(key=lambda r: (-abs(r[0]), -max(r[2], r[3])))
    ops_a, ops_b = (sum(d["ops_self_cpu_s"].values()) * per[k] for k, d in (("a", a), ("b", b)))
    wall_a, wall_b = a["wall_s"] * per["a"], b["wall_s"] * per["b"]
    lines = [f"A: vllm {a['vllm']} ({a['steps']} steps, {a['tokens']} tokens); "
             f"B: vllm {b['vllm']} ({b['steps']} steps, {b['tokens']} tokens); ms per engine step",
             "", "| what | A | B | B - A |", "|---|---:|---:|---:|",
             f"| wall time of a step | {wall_a:.3f} | {wall_b:.3f} | {wall_b - wall_a:+.3f} |",
             f"| all ops' self CPU time | {ops_a:.3f} | {ops_b:.3f} | {ops_b - ops_a:+.3f} |",
             f"| not in any op (Python, scheduler, dispatch) | {wall_a - ops_a:.3f} | {wall_b - ops_b:.3f} | "
             f"{(wall_b - ops_b) - (wall_a - ops_a):+.3f} |"]
    lines += [f"| `{name}` | {ta:.3f} | {tb:.3f} | {d:+.3f} |" for d, name, ta, tb in rows[:top]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=20, help="profiled runs of the cell's workload (default 20)")
    parser.add_argument("--cell", default="4x64x16", help="batch x prompt x concurrency (default 4x64x16)")
    parser.add_argument("--out", type=Path, help="write the profile here (JSON)")
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("A", "B"), help="compare two profiles; run nothing")
    parser.add_argument("--top", type=int, default=15, help="ops listed by --compare (default 15)")
    args = parser.parse_args(argv)
    if args.compare:
        missing = [str(p) for p in args.compare if not p.is_file()]
        if missing:
            parser.error(f"{', '.join(missing)}: not found; make each with --out first")
        print(compare(*args.compare, args.top))
        return 0
    if args.out is None:
        parser.error("give --out FILE (or --compare A B)")
    found = measure(args.runs, args.cell)
    args.out.write_text(json.dumps(found, indent=1) + "\n", encoding="utf-8")
    print(f"{args.out}: vllm {found['vllm']}, {found['steps']} steps, {found['wall_s'] * 1e3 / found['steps']:.3f} ms "
          "a step", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
