"""Two backends side by side on the same cells, in one process: output tokens/s of each and their ratio.

Made for ``continuous`` against ``hf-static`` (``tools/bench_continuous.py``),
but any two registered backends work. Each cell runs every backend
``--repeats`` times, interleaved (A B, B A, A B, ...) so drift and a noisy
neighbour hit both alike. On a shared machine a slow run means someone else
had the cores, never that the code got faster, so the table reports each
backend's *best* run (as ``timeit`` does) and the ratio of the bests;
``--stat median`` reports medians and the median of the paired ratios.
Workloads: ``WorkloadSpec(num_prompts=16, prompt, num_warmup=1)``,
closed-loop arrivals, targets alternating 16/32 as in the study.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

DEFAULT_PROMPTS = ("64", "256", "512")
DEFAULT_BATCHES = (1, 4, 8)
DEFAULT_CONCURRENCY = (4, 8, 16)
MIX_PROMPT = "64,256,512"  # the heterogeneous-length mix: each request draws one of these
MIX_CELLS = ((4, 8), (8, 8), (8, 16))  # (batch, concurrency) for the mix


@dataclass(frozen=True, slots=True)
class Cell:
    prompt: str  # a LengthSpec text: "512" or "64,256,512"
    batch_size: int
    concurrency: int

    def __post_init__(self) -> None:
        if self.batch_size < 1 or self.concurrency < 1:
            raise ValueError(f"batch size and concurrency must be >= 1, got {self.batch_size}, {self.concurrency}")

    @property
    def target(self) -> float:
        """The ratio the issue asks of continuous over static: 1.25 when requests queue behind a full batch."""
        return 1.25 if self.concurrency > self.batch_size else 0.97


@dataclass(frozen=True, slots=True)
class CellResult:
    cell: Cell
    throughput: dict[str, list[float]]  # backend -> output tok/s of each repeat
    ratios: list[float]  # second / first backend, per interleaved pair
    errors: list[str]

    def value(self, backend: str, stat: str) -> float:
        values = self.throughput.get(backend) or [float("nan")]
        return max(values) if stat == "best" else statistics.median(values)

    def ratio(self, names: list[str], stat: str) -> float:
        if stat == "best":
            return self.value(names[1], stat) / self.value(names[0], stat)
        return statistics.median(self.ratios) if self.ratios else float("nan")


def cells(prompts: list[str], batches: list[int], concurrency: list[int], mix: bool) -> list[Cell]:
    grid = [Cell(p, b, c) for p in prompts for b in batches for c in concurrency]
    return grid + ([Cell(MIX_PROMPT, b, c) for b, c in MIX_CELLS] if mix else [])


def run_cell_pair(model, backends: dict, cell: Cell, repeats: int, num_prompts: int) -> CellResult:
    from batchperf.backends.runner import run_cell
    from batchperf.measure.metrics import compute_metrics, token_count_errors
    from batchperf.measure.workload import LengthSpec, WorkloadSpec

    spec = WorkloadSpec(num_prompts=num_prompts, prompt_len=LengthSpec.parse(cell.prompt), num_warmup=1)
    workload = spec.build(model.vocab_size, model.max_model_len, first_token_id=1)
    names = list(backends)
    throughput: dict[str, list[float]] = {name: [] for name in names}
    ratios, errors = [], []
    for rep in range(repeats):
        order = names if rep % 2 == 0 else names[::-1]
        got = {}
        for name in order:
            try:
                trace = run_cell(backends[name], workload, cell.batch_size, cell.concurrency)
            except Exception as exc:  # one broken cell must not take the table down
                errors.append(f"{name}: {type(exc).__name__}: {exc}")
                continue
            errors.extend(f"{name}: {line}" for line in token_count_errors(trace))
            got[name] = compute_metrics(trace)["output_throughput"]
            throughput[name].append(got[name])
        if len(got) == 2:
            ratios.append(got[names[1]] / got[names[0]])
    return CellResult(cell, throughput, ratios, errors)


def format_table(results: list[CellResult], names: list[str], stat: str = "best") -> str:
    base, new = names
    lines = [
        f"| prompt | batch | conc | {base} tok/s | {new} tok/s | ratio | target | met |",
        "|---|--:|--:|--:|--:|--:|--:|:-:|",
    ]
    for r in results:
        c = r.cell
        ratio = r.ratio(names, stat)
        met = "yes" if ratio >= c.target else "NO"
        if r.errors:
            met = "ERROR"
        prompt = "mix " + c.prompt if "," in c.prompt else c.prompt
        lines.append(
            f"| {prompt} | {c.batch_size} | {c.concurrency} | {r.value(base, stat):.1f} | {r.value(new, stat):.1f} "
            f"| {ratio:.2f} | {c.target:.2f} | {met} |"
        )
    return "\n".join(lines)


def _int_list(text: str) -> list[int]:
    try:
        return [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--baseline", default="hf-static", help="the reference backend (default: hf-static)")
    parser.add_argument("--backend", default="continuous", help="the backend compared with it (default: continuous)")
    parser.add_argument("--model", default="tiny-qwen2", help="a registered model (default: tiny-qwen2)")
    parser.add_argument("--prompt-lens", default=",".join(DEFAULT_PROMPTS),
                        help="comma-separated fixed prompt lengths (default: 64,256,512)")
    parser.add_argument("--batch-sizes", type=_int_list, default=list(DEFAULT_BATCHES), help="default: 1,4,8")
    parser.add_argument("--concurrency", type=_int_list, default=list(DEFAULT_CONCURRENCY), help="default: 4,8,16")
    parser.add_argument("--no-mix", action="store_true", help=f"leave out the {MIX_PROMPT} mixed-length cells")
    parser.add_argument("--mix-only", action="store_true", help="run only the mixed-length cells")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved runs per backend per cell (default: 3)")
    parser.add_argument("--stat", choices=("best", "median"), default="best",
                        help="per backend: best run (default; robust to busy neighbours) or median")
    parser.add_argument("--num-prompts", type=int, default=16, help="measured requests per run (default: 16)")
    parser.add_argument("--threads", type=int, default=0,
                        help="torch threads (default: torch's choice; 1 is steadier on a shared machine)")
    parser.add_argument("--json", type=Path, help="also write every repeat's numbers here")


def main(args: argparse.Namespace) -> int:
    import torch

    from batchperf.backends import create_backend
    from batchperf.suite.models import get_model_spec, load_model

    if args.repeats < 1:
        raise SystemExit("--repeats must be >= 1")
    if args.threads:
        torch.set_num_threads(args.threads)
    prompts = [] if args.mix_only else [p for p in args.prompt_lens.split(",") if p.strip()]
    todo = cells(prompts, args.batch_sizes, args.concurrency, mix=not args.no_mix)
    model = load_model(get_model_spec(args.model))
    names = [args.baseline, args.backend]
    backends = {name: create_backend(name, model) for name in names}
    results = []
    try:
        for cell in todo:
            result = run_cell_pair(model, backends, cell, args.repeats, args.num_prompts)
            results.append(result)
            print(format_table([result], names, args.stat).splitlines()[-1], file=sys.stderr, flush=True)
    finally:
        for backend in backends.values():
            backend.close()
    print(f"# {args.model}, {args.num_prompts} prompts/run, targets 16/32, {args.stat} of {args.repeats} "
          f"interleaved runs per backend, torch threads {torch.get_num_threads()}")
    print(format_table(results, names, args.stat))
    for r in results:
        for error in r.errors:
            print(f"error in {r.cell}: {error}")
    if args.json:
        args.json.write_text(json.dumps([
            {**asdict(r.cell), "throughput": r.throughput, "ratios": r.ratios, "errors": r.errors} for r in results
        ], indent=1))
    return 1 if any(r.errors for r in results) else 0
