"""The telemetry sampler's cost, side by side on one cell: output throughput with and without it.

    PYTHONPATH=src python tools/telemetry_overhead.py [--device cpu] [--repeats 5]

Runs the same cell alternately without and with a :class:`~batchperf.telemetry.sampler.Sampler`
(ABAB…, so drift hits both equally) and prints the median output throughput of
each, the median of the per-pair ratios, the process's CPU time per output
token with and without, and the sampler thread's own CPU time as a share of
the cell's wall time (the last two are figures that other load on a shared
machine does not blur the way it blurs wall-clock throughput). The sampler
should cost under 2%.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time

from batchperf.backends import create_backend
from batchperf.backends.cell_run import run_cell
from batchperf.measure.metrics import compute_metrics
from batchperf.suite.models import get_model_spec, load_model
from batchperf.telemetry.sampler import Sampler
from batchperf.workload.spec import LengthSpec, WorkloadSpec


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny-qwen2")
    parser.add_argument("--backend", default="hf-static")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--prompt-len", default="64")
    parser.add_argument("--num-prompts", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=7, help="runs of each variant")
    parser.add_argument("--interval-s", type=float, default=0.05)
    args = parser.parse_args()

    model = load_model(get_model_spec(args.model), device=args.device)
    backend = create_backend(args.backend, model)
    spec = WorkloadSpec(args.num_prompts, LengthSpec.parse(args.prompt_len), num_warmup=1)
    workload = spec.build(model.vocab_size, model.max_model_len)
    run_cell(backend, workload, args.batch_size, args.batch_size)  # first-run costs, not data

    results: dict[str, list[float]] = {"without": [], "with": []}
    cpu_ms_per_token: dict[str, list[float]] = {"without": [], "with": []}
    last: dict = {}
    for _ in range(args.repeats):
        for variant in ("without", "with"):
            sampler = Sampler(model.device, args.interval_s)
            cpu0 = time.process_time()
            with sampler if variant == "with" else contextlib.nullcontext():
                trace = run_cell(backend, workload, args.batch_size, args.batch_size)
            cpu = time.process_time() - cpu0  # all threads of this process, sampler included
            metrics = compute_metrics(trace)
            results[variant].append(metrics["output_throughput"])
            cpu_ms_per_token[variant].append(1e3 * cpu / metrics["total_output_tokens"])
            if variant == "with":
                last = sampler.summary(int(metrics["total_output_tokens"]))
    backend.close()

    without, with_ = statistics.median(results["without"]), statistics.median(results["with"])
    print(f"cell: {args.model} {args.backend} bs{args.batch_size} p{args.prompt_len} "
          f"n{args.num_prompts} on {args.device}; sampler every {args.interval_s * 1e3:.0f} ms; "
          f"{args.repeats} runs each, alternating")
    print(f"{'variant':<18}{'median tok/s':>14}{'CPU ms/token':>14}  tok/s of each run")
    for variant, label in (("without", "without sampler"), ("with", "with sampler")):
        runs = " ".join(f"{v:.1f}" for v in results[variant])
        print(f"{label:<18}{statistics.median(results[variant]):>14.1f}"
              f"{statistics.median(cpu_ms_per_token[variant]):>14.2f}  {runs}")
    pairs = statistics.median(w / wo for w, wo in zip(results["with"], results["without"]))
    print(f"ratio of medians with/without: {with_ / without:.4f}; median per-pair ratio: {pairs:.4f} "
          f"(overhead {100 * (1 - pairs):+.2f}%)")
    cpu_ratio = statistics.median(cpu_ms_per_token["with"]) / statistics.median(cpu_ms_per_token["without"])
    print(f"process CPU per output token, with/without: {cpu_ratio:.4f} ({100 * (cpu_ratio - 1):+.2f}%; "
          "CPU time is far less disturbed than wall time by other load on the machine)")
    print(f"sampler thread CPU: {last['sampler_cpu_s'] * 1e3:.1f} ms over a {last['duration_s']:.2f} s cell "
          f"= {100 * last['sampler_cpu_s'] / last['duration_s']:.3f}% ({last['samples']} samples; "
          f"nvml: {last['nvml']}; cell peak RSS {last['cell_peak_rss_bytes'] / 2**20:.0f} MiB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
