"""Send lag and engine throughput of an in-process backend, with and without drive's sender thread, side by side.

One process, one model, one backend; the arms alternate round by round so that a loaded machine's drift hits
them alike:

- ``driving-thread``: the backend's run says its step does not block (the path before the sender thread): the
  driving thread sends what is due between steps;
- ``sender``: the sender thread sends each request when it is due (:mod:`batchperf.backends.sender`);
- ``sender-siX``: the same with ``sys.setswitchinterval(X ms)`` for the run (``--switch-intervals``).

Two workloads per round: the CPU tier's trace (its send lag: sent - due, p99 over the round's requests) and a
rate workload above the engine's capacity (its output throughput, tokens/s, and its send lag: the engine is
busy the whole run, so the sender wakes while it computes). Prints the median over rounds per arm.

    PYTHONPATH=src python studies/send-lag/send_lag_ab.py --backend continuous --rounds 5
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import replace
from pathlib import Path

from batchperf.backends import create_backend
from batchperf.measure.metrics import compute_metrics
from batchperf.suite.models import get_model_spec, load_model
from batchperf.workload.spec import Arrival, LengthSpec, WorkloadSpec
from batchperf.workload.traffic import parse_workload

REPO = Path(__file__).resolve().parents[2]
TRACE = "trace:fixtures/traffic/mini_trace.jsonl"
RUN_CLASSES = {"continuous": ("batchperf.backends.continuous", "_EngineRun"),
               "vllm": ("batchperf.backends.vllm_engine", "_VllmRun"),
               "hf-static": ("batchperf.backends.hf_static", "_Batches")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="continuous", choices=sorted(RUN_CLASSES))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--rate", type=float, default=40.0, help="req/s of the saturating workload")
    parser.add_argument("--requests", type=int, default=24, help="requests of the saturating workload")
    parser.add_argument("--switch-intervals", default="", help="ms, comma-separated: extra sender arms")
    args = parser.parse_args()

    import importlib

    module, name = RUN_CLASSES[args.backend]
    run_class = getattr(importlib.import_module(module), name)
    model = load_model(get_model_spec("tiny-qwen2"))
    backend = create_backend(args.backend, model)
    base = WorkloadSpec(num_prompts=16, prompt_len=LengthSpec.parse("64"), output_lens=(16, 32))
    trace = parse_workload(TRACE, base, root=REPO).build(model.vocab_size, model.max_model_len)
    rate_spec = replace(base, num_prompts=args.requests, arrival=Arrival("rate", args.rate))
    busy = replace(rate_spec.build(model.vocab_size, model.max_model_len), unlimited=True)
    arms = {"driving-thread": (False, None), "sender": (True, None),
            **{f"sender-si{x}ms": (True, float(x) / 1000) for x in args.switch_intervals.split(",") if x}}
    default_interval = sys.getswitchinterval()
    results: dict[str, dict[str, list[float]]] = {arm: {} for arm in arms}
    backend.run(trace.warmup_only(), args.batch_size, 4)  # builds and warms the engine
    for round_ in range(args.rounds):
        for arm, (threaded, interval) in arms.items():
            run_class.blocking_step = threaded
            sys.setswitchinterval(interval or default_interval)
            try:
                for label, workload in (("trace", trace), ("busy", busy)):
                    m = compute_metrics(backend.run(workload, args.batch_size, 4))
                    out = results[arm]
                    out.setdefault(f"{label} p99 send lag ms", []).append(m["p99_send_lag_ms"])
                    if label == "busy":
                        out.setdefault("busy output tok/s", []).append(m["output_throughput"])
            finally:
                sys.setswitchinterval(default_interval)
        print(f"round {round_ + 1}/{args.rounds} done", file=sys.stderr)
    keys = list(next(iter(results.values())))
    print(f"{args.backend}, bs {args.batch_size}, {args.rounds} rounds (each: trace + busy rate {args.rate:g} req/s "
          f"x {args.requests}): median [min, max] over rounds")
    print(f"{'arm':16s}" + "".join(f"{k:>30s}" for k in keys))
    for arm, out in results.items():
        print(f"{arm:16s}" + "".join(f"{spread(out[k]):>30s}" for k in keys))
    backend.close()


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} [{min(values):.2f}, {max(values):.2f}]"


if __name__ == "__main__":
    main()
