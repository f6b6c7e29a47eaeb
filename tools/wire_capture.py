"""The wire as the arbiter: a vllm-server cell's latencies as the loopback interface saw them, beside the client's.

    PYTHONPATH=src python tools/wire_capture.py [--concurrency 1,16] [--runs 1] [--batch-size 4]
        [--num-prompts 48] [--prompt-len 64] [--output-lens 24] [--warmup-rounds 1] [--scheduling fifo,normal]
        [--server-arg=--stream-interval=1] [--json FILE]

Starts the suite's own vLLM server on the tiny CPU model (``--max-num-seqs`` = ``--batch-size``), then for each
run and concurrency (alternating which concurrency goes first) runs the vllm-server cell as ``pytest perf_tests``
runs it: the suite's own round (:func:`batchperf.suite.cell.one_round`: the cell's warm-up requests, then the
measured run inside the telemetry sampler), ``--warmup-rounds`` whole rounds first as pytest-benchmark does, and
the measured round inside a capture of the server port's loopback traffic with kernel timestamps
(:mod:`batchperf.telemetry.wire_capture`: an AF_PACKET socket in its own process, needs root or CAP_NET_RAW).
It prints,
per run, the client's and the wire's mean TTFT, TPOT, ITL and E2EL (and output throughput), whether every mean is
within 5% of the wire's, how late the client stamped each chunk (median, P99, max) and whether the client-lag
check marked the run client-bound (with the stalls that marked it), and the load average; ``--json`` is rewritten
after every run, so an interrupted study keeps what it measured. Not part of CI: a study tool
(docs/measurement.md, "The wire as the arbiter"; studies/wire/).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from batchperf.backends.vllm_server import VLLMServerBackend
from batchperf.launch.environ import CLIENT_REALTIME_ENV
from batchperf.measure.client_lag import BOUND, CLIENT_WITHIN, REASONS, SCHEDULING, STALLS
from batchperf.measure.metrics import compute_metrics
from batchperf.measure.wire import chunk_lateness, completions, wire_trace
from batchperf.suite.cell import build_workload, one_round
from batchperf.suite.matrix import Cell, CellParams
from batchperf.suite.models import get_model_spec, load_model
from batchperf.telemetry.wire_capture import Capture, capture_refused
from batchperf.workload.spec import LengthSpec, WorkloadSpec

MEANS = ("mean_ttft_ms", "mean_tpot_ms", "mean_itl_ms", "mean_e2el_ms")
WITHIN = CLIENT_WITHIN  # the bar: the client's means within 5% of the wire's


def one_run(backend: VLLMServerBackend, cell: Cell, warmup_rounds: int, port: int, workdir: Path,
            keep: Path | None = None) -> dict[str, Any]:
    """The cell's warm-up rounds, then its measured round under the capture: each the suite's own round."""
    workload = build_workload(cell, backend.model)
    for _ in range(warmup_rounds):
        one_round(backend, cell, workload)
    load_before = os.getloadavg()
    with Capture(port, workdir, keep=keep) as capture:
        trace = one_round(backend, cell, workload)
    load_after = os.getloadavg()
    if keep is not None:
        (keep / f"{capture.path.stem}.trace.json").write_text(json.dumps(trace.to_dict()))
    wire = wire_trace(completions(capture.packets, port), {tuple(s.prompt_ids): s for s in workload.requests}, trace)
    client, arbiter = compute_metrics(trace), compute_metrics(wire)
    late = sorted(x * 1e3 for x in chunk_lateness(trace, wire))
    ratios = {k: client[k] / arbiter[k] for k in MEANS if arbiter[k]}
    return {"concurrency": cell.concurrency, "cell": cell.id,
            "load_average_1m": {"before": load_before[0], "after": load_after[0]},
            "telemetry_samples": trace.telemetry.get("samples"), "scheduling_client": trace.client.get(SCHEDULING),
            "stalls": trace.client.get(STALLS, []),
            "client": {k: client[k] for k in (*MEANS, "output_throughput", "completed", "total_output_tokens")},
            "wire": {k: arbiter[k] for k in (*MEANS, "output_throughput", "completed", "total_output_tokens")},
            "ratio": ratios, "within": all(abs(r - 1) <= WITHIN for r in ratios.values()),
            "chunk_late_ms": {"median": statistics.median(late), "p99": late[int(0.99 * (len(late) - 1))],
                              "max": late[-1]} if late else {},
            "client_bound": trace.client.get(BOUND), "reasons": trace.client.get(REASONS, []),
            "check": {k: v for k, v in trace.client.items() if isinstance(v, (int, float)) and not isinstance(v, bool)},
            "capture": capture.stats}


def line(run: int, r: dict[str, Any]) -> str:
    c, w = r["client"], r["wire"]
    means = " ".join(f"{k.split('_')[1]} {c[k]:.1f}/{w[k]:.1f}" for k in MEANS)
    late = r["chunk_late_ms"]
    mark = "client-bound" if r["client_bound"] else "not marked"
    verdict = "within 5%" if r["within"] else "MISS"
    load = r["load_average_1m"]
    return (f"run {run} c={r['concurrency']}: client/wire ms {means}; out tok/s {c['output_throughput']:.0f}/"
            f"{w['output_throughput']:.0f}; chunk late ms p50 {late.get('median', 0):.1f} p99 {late.get('p99', 0):.1f} "
            f"max {late.get('max', 0):.1f}; loop lag max {r['check'].get('loop_lag_max_ms', 0):.1f} ms; "
            f"load {load['before']:.1f}-{load['after']:.1f}; {verdict}; {mark}"
            + (f" ({'; '.join(r['reasons'])})" if r["reasons"] else ""))


def _positive_ints(text: str) -> list[int] | None:
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        return None
    return values if values and all(v >= 1 for v in values) else None


def refusals(args: argparse.Namespace) -> list[str]:
    """What is wrong with the arguments, each naming its option: checked before the model loads or the server
    starts (those take minutes; a refusal after them wastes them)."""
    problems = []
    if _positive_ints(args.concurrency) is None:
        problems.append(f"--concurrency {args.concurrency!r}: give comma-separated integers >= 1, e.g. 1,16")
    for name in ("runs", "batch_size", "num_prompts"):
        if getattr(args, name) < 1:
            problems.append(f"--{name.replace('_', '-')} {getattr(args, name)}: must be >= 1")
    if unknown := set(args.scheduling.split(",")) - {"fifo", "normal"}:
        problems.append(f"--scheduling: {', '.join(sorted(unknown))} is not fifo or normal")
    if args.json is not None:
        folder = args.json.parent
        if args.json.is_dir():
            problems.append(f"--json {args.json}: is a folder; give a file name")
        elif not folder.is_dir():
            problems.append(f"--json {args.json}: its folder {folder} does not exist")
        elif not os.access(folder, os.W_OK):
            problems.append(f"--json {args.json}: its folder {folder} is not writable")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", default="1,16", help="comma-separated concurrencies, alternated per run")
    parser.add_argument("--runs", type=int, default=1, help="runs of each concurrency")
    parser.add_argument("--batch-size", type=int, default=4, help="the server's --max-num-seqs")
    parser.add_argument("--num-prompts", type=int, default=48)
    parser.add_argument("--prompt-len", default="64")
    parser.add_argument("--output-lens", default="24")
    parser.add_argument("--warmup-rounds", type=int, default=1,
                        help="whole rounds run before each measured one, as the CPU tier's pytest-benchmark does")
    parser.add_argument("--scheduling", default="fifo",
                        help="the client's scheduling per run: fifo (SCHED_FIFO where allowed), normal "
                             "($BATCHPERF_CLIENT_REALTIME=0), or both, alternated: fifo,normal")
    parser.add_argument("--server-arg", action="append", default=[], help="one more server argument (repeatable)")
    parser.add_argument("--json", type=Path, help="write every run's figures here")
    parser.add_argument("--keep", type=Path, help="keep each run's capture and client trace in this folder")
    args = parser.parse_args(argv)
    if problems := refusals(args):
        parser.error("; ".join(problems))
    try:  # the workload's own checks (--prompt-len, --output-lens), also before anything starts
        WorkloadSpec(args.num_prompts, LengthSpec.parse(args.prompt_len),
                     output_lens=tuple(int(v) for v in args.output_lens.split(",")),
                     num_warmup=WorkloadSpec.default_warmup(args.num_prompts))
    except ValueError as exc:
        parser.error(f"--prompt-len {args.prompt_len!r} / --output-lens {args.output_lens!r}: {exc}")
    if why := capture_refused():  # the capture runs only after the model load and the server start: ask first
        parser.exit(2, f"{parser.prog}: error: {why}\n")

    os.environ.pop("BATCHPERF_SERVER_URL", None)
    model = load_model(get_model_spec("tiny-qwen2"))
    backend = VLLMServerBackend(model, server_args=[a for arg in args.server_arg for a in arg.split("=", 1)])
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    schedulings = args.scheduling.split(",")
    results = []
    try:
        port = int(backend.base_url(args.batch_size).rsplit(":", 1)[1])
        with tempfile.TemporaryDirectory(prefix="wire-") as tmp:
            for run in range(1, args.runs + 1):
                for scheduling in schedulings if run % 2 else schedulings[::-1]:
                    os.environ[CLIENT_REALTIME_ENV] = "0" if scheduling == "normal" else "1"
                    for concurrency in concurrencies if run % 2 else concurrencies[::-1]:
                        cell = CellParams("cpu", "cpu", "tiny-qwen2", "vllm-server", str(args.batch_size),
                                          args.prompt_len, str(concurrency), str(args.num_prompts), rounds=1,
                                          warmup_rounds=args.warmup_rounds, arrival="closed",
                                          output_lens=args.output_lens).resolve()
                        r = one_run(backend, cell, args.warmup_rounds, port, Path(tmp), args.keep)
                        r["run"], r["scheduling"] = run, scheduling
                        results.append(r)
                        print(f"[{scheduling}] " + line(run, r), flush=True)
                        if args.json:  # after every run: an interrupted study keeps what it measured
                            args.json.write_text(json.dumps(results, indent=1))
    finally:
        backend.close()
    for scheduling, concurrency in ((s, c) for s in schedulings for c in concurrencies):
        mine = [r for r in results if r["concurrency"] == concurrency and r["scheduling"] == scheduling]
        misses = [r for r in mine if not r["within"]]
        unmarked = [r["run"] for r in misses if not r["client_bound"]]
        print(f"[{scheduling}] c={concurrency}: {len(mine) - len(misses)} of {len(mine)} runs within 5% of the wire; "
              f"{len(misses)} missed, {len(misses) - len(unmarked)} of them marked client-bound"
              + (f" (unmarked: runs {unmarked})" if unmarked else ""), file=sys.stdout)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
