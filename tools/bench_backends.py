"""Output tokens/s of every backend on the same CPU cells, side by side, with the ratio to ``vllm``.

    PYTHONPATH=src /work/vllmvenv/bin/python tools/bench_backends.py            # a few minutes on 2 cores

Each cell runs its warm-up requests first (dropped), then the measured ones,
``--rounds`` times; the table shows the median round. A backend that cannot
run here is listed as "not available" with the reason.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

DEFAULT_BACKENDS = ("hf-static", "continuous", "hf-continuous", "vllm", "vllm-server")


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--backends", default=",".join(DEFAULT_BACKENDS))
    parser.add_argument("--model", default="tiny-qwen2")
    parser.add_argument("--batch-sizes", default="4", help="comma list (each needs its own vLLM engine/server)")
    parser.add_argument("--concurrency", default="4,8", help="comma list")
    parser.add_argument("--prompt-len", default="64")
    parser.add_argument("--num-prompts", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=0,
                        help="torch threads for the in-process backends (0: torch's default); vllm sets its own")


def main(args: argparse.Namespace) -> int:
    import os

    # vLLM logs to stdout at INFO by default; keep stdout for the table
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    from batchperf.backends import BackendUnavailable, backend_names, create_backend
    from batchperf.backends.runner import run_cell
    from batchperf.measure.metrics import compute_metrics
    from batchperf.measure.workload import LengthSpec, WorkloadSpec
    from batchperf.suite.models import get_model_spec, load_model

    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    model = load_model(get_model_spec(args.model))
    spec = WorkloadSpec(num_prompts=args.num_prompts, prompt_len=LengthSpec.parse(args.prompt_len),
                        num_warmup=WorkloadSpec.default_warmup(args.num_prompts))
    workload = spec.build(model.vocab_size, model.max_model_len)
    cells = [(int(b), int(c)) for b in args.batch_sizes.split(",") for c in args.concurrency.split(",")]
    names = [n.strip() for n in args.backends.split(",") if n.strip()]
    results: dict[str, dict[tuple[int, int], float]] = {}
    missing: dict[str, str] = {}
    for name in names:
        if name not in backend_names():
            missing[name] = "not registered on this branch"
            continue
        try:
            backend = create_backend(name, model)
        except BackendUnavailable as exc:
            missing[name] = str(exc)
            continue
        try:
            for bs, conc in cells:
                started = time.perf_counter()
                rounds = [compute_metrics(run_cell(backend, workload, bs, conc))["output_throughput"]
                          for _ in range(args.rounds)]
                results.setdefault(name, {})[(bs, conc)] = statistics.median(rounds)
                print(f"  {name:14s} bs={bs} c={conc}: {[round(r, 1) for r in rounds]} tok/s "
                      f"({time.perf_counter() - started:.0f} s incl. startup)", file=sys.stderr)
        except Exception as exc:  # noqa: BLE001 - one broken backend must not hide the others
            missing[name] = f"failed: {type(exc).__name__}: {exc}"
        finally:
            backend.close()
    print_table(names, cells, results, missing, args)
    return 0


def print_table(names: list[str], cells: list[tuple[int, int]], results: dict[str, dict[tuple[int, int], float]],
                missing: dict[str, str], args: argparse.Namespace) -> None:
    print(f"\noutput tokens/s, {args.model}, prompt {args.prompt_len}, {args.num_prompts} requests of 16/32 tokens, "
          f"median of {args.rounds} rounds (x = ratio to vllm)")
    header = f"{'backend':14s}" + "".join(f"{f'bs{b} c{c}':>20s}" for b, c in cells)
    print(header)
    print("-" * len(header))
    base = results.get("vllm", {})
    for name in names:
        if name in missing:
            print(f"{name:14s}  not available: {missing[name][:150]}")
            continue
        row = f"{name:14s}"
        for cell in cells:
            value = results[name][cell]
            ratio = f"{value / base[cell]:.2f}x" if cell in base and base[cell] > 0 else "-"
            row += f"{value:>13.1f} {ratio:>6s}"
        print(row)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_cli_args(parser)
    raise SystemExit(main(parser.parse_args()))
