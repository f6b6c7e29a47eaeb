"""batchperf's ``vllm-server`` client against vLLM's own ``vllm bench serve``, on one server, same prompts.

    PYTHONPATH=src python tools/vs_vllm_bench.py [--stream-intervals 1,4] [--pairs 3] [--num-prompts 64]
        [--batch-size 16] [--concurrency 16] [--prompt-len 64] [--output-lens 16,32]

For each stream interval, one vLLM server is started on the tiny CPU model
(as the suite starts it, plus ``--stream-interval N``). Then, in ``--pairs``
pairs that alternate which client goes first, the same token-id prompts and
targets are run by ``vllm bench serve`` (tools/vllm_bench_prompts.py: vLLM's
CLI with only its dataset replaced) and by batchperf's ``vllm-server``
backend, given the server as ``BATCH_SIZE=URL`` as a user would. Both send
the same number of warm-up requests first. It prints, per metric, each
client's median over the pairs and the median (and range) of the per-pair
ratios batchperf / vLLM. Not part of CI: a study, minutes per interval.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from batchperf.backends.cell_run import run_cell
from batchperf.backends.vllm_server import SERVED_NAME, VLLMServerBackend
from batchperf.measure.metrics import compute_metrics
from batchperf.suite.models import LoadedModel, get_model_spec, load_model
from batchperf.workload.spec import LengthSpec, Workload, WorkloadSpec

WRAPPER = Path(__file__).with_name("vllm_bench_prompts.py")
METRICS = ("output_throughput", "request_throughput", "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms",
           "mean_tpot_ms", "median_tpot_ms", "mean_itl_ms", "median_itl_ms", "p99_itl_ms", "mean_e2el_ms",
           "median_e2el_ms", "p99_e2el_ms")


def vllm_bench(url: str, model: LoadedModel, workload: Workload, concurrency: int, out_dir: Path) -> dict[str, Any]:
    """One ``vllm bench serve`` run of ``workload``'s requests; its result file's numbers."""
    prompts = out_dir / "prompts.json"
    prompts.write_text(json.dumps([{"prompt": list(r.prompt_ids), "output_len": r.target_len}
                                   for r in workload.requests]))
    result = out_dir / "vllm-result.json"
    result.unlink(missing_ok=True)
    argv = [sys.executable, str(WRAPPER), str(prompts), "--backend", "vllm", "--base-url", url,
            "--endpoint", "/v1/completions", "--model", str(model.path), "--served-model-name", SERVED_NAME,
            "--tokenizer", str(model.path), "--dataset-name", "custom", "--num-prompts", str(len(workload.requests)),
            "--max-concurrency", str(concurrency), "--num-warmups", str(len(workload.warmup)), "--ignore-eos",
            "--temperature", "0", "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99",
            "--save-result", "--result-dir", str(out_dir), "--result-filename", result.name, "--disable-tqdm"]
    done = subprocess.run(argv, capture_output=True, text=True, env=os.environ.copy())
    if done.returncode != 0 or not result.exists():
        raise RuntimeError(f"vllm bench serve failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return json.loads(result.read_text())


def batchperf_run(client: VLLMServerBackend, workload: Workload, batch_size: int, concurrency: int) -> dict[str, Any]:
    trace = run_cell(client, workload, batch_size, concurrency)
    if errors := [r.error for r in trace.requests if r.error]:
        raise RuntimeError(f"batchperf's run had failed requests: {errors[:3]}")
    return compute_metrics(trace)


def compare(model: LoadedModel, workload: Workload, args: argparse.Namespace, interval: int) -> list[str]:
    """Start one server at ``interval``, run the pairs, return the table's lines."""
    server = VLLMServerBackend(model, server_args=("--stream-interval", str(interval)))
    try:
        url = server.base_url(args.batch_size)
        client = VLLMServerBackend(model, server_url=f"{args.batch_size}={url}")  # as a user gives a server
        runs: dict[str, list[dict[str, Any]]] = {"vllm": [], "batchperf": []}
        with tempfile.TemporaryDirectory(prefix="vs-vllm-") as tmp:
            for pair in range(args.pairs):
                order = ("vllm", "batchperf") if pair % 2 == 0 else ("batchperf", "vllm")
                for who in order:
                    if who == "vllm":
                        runs[who].append(vllm_bench(url, model, workload, args.concurrency, Path(tmp)))
                    else:
                        runs[who].append(batchperf_run(client, workload, args.batch_size, args.concurrency))
                print(f"  stream interval {interval}: pair {pair + 1}/{args.pairs} done", file=sys.stderr)
    finally:
        server.close()
    return table(runs, interval, args)


def table(runs: dict[str, list[dict[str, Any]]], interval: int, args: argparse.Namespace) -> list[str]:
    lines = [f"server --stream-interval {interval}, --max-num-seqs {args.batch_size}; concurrency "
             f"{args.concurrency}, {args.num_prompts} prompts of {args.prompt_len} tokens, outputs {args.output_lens}, "
             f"{args.pairs} pairs",
             "",
             "| metric | vllm bench serve | batchperf | ratio (median) | ratio range |",
             "|---|---:|---:|---:|---:|"]
    for name in METRICS:
        ours = [r[name] for r in runs["batchperf"]]
        theirs = [r[name] for r in runs["vllm"]]
        ratios = [a / b for a, b in zip(ours, theirs) if b]
        spread = f"{min(ratios):.3f}–{max(ratios):.3f}" if ratios else "-"
        median_ratio = f"{statistics.median(ratios):.3f}" if ratios else "-"
        lines.append(f"| {name} | {statistics.median(theirs):.2f} | {statistics.median(ours):.2f} | {median_ratio} "
                     f"| {spread} |")
    counts = {who: sorted({(r["completed"], r["total_output_tokens"]) for r in rs}) for who, rs in runs.items()}
    lines.append(f"\n(completed, output tokens) per run: vLLM {counts['vllm']}, batchperf {counts['batchperf']}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stream-intervals", default="1,4", help="a server per interval (vLLM's --stream-interval)")
    parser.add_argument("--pairs", type=int, default=3, help="alternating runs of each client per server")
    parser.add_argument("--num-prompts", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=16, help="the server's --max-num-seqs")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--prompt-len", default="64")
    parser.add_argument("--output-lens", default="16,32")
    args = parser.parse_args()

    os.environ.pop("BATCHPERF_SERVER_URL", None)
    model = load_model(get_model_spec("tiny-qwen2"))
    spec = WorkloadSpec(args.num_prompts, LengthSpec.parse(args.prompt_len),
                        output_lens=tuple(int(v) for v in args.output_lens.split(",")),
                        num_warmup=WorkloadSpec.default_warmup(args.num_prompts))
    workload = spec.build(model.vocab_size, model.max_model_len)
    for interval in (int(v) for v in args.stream_intervals.split(",")):
        print("\n".join(compare(model, workload, args, interval)) + "\n", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
