"""``batchperf versus``: two or more backends on the same cells of the matrix, interleaved in one process.

    batchperf versus --batchperf-backends hf-static,continuous --threads 1
    batchperf versus --batchperf-backends vllm,hf-static,continuous,hf-continuous --batchperf-batch-sizes 4

The first backend is the reference; each row gives every backend's output
tokens/s and the ratio to the reference (for continuous over hf-static also
the target and whether it is met). Logic in :mod:`batchperf.suite.versus`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from batchperf.suite.matrix import TIERS, narrowed
from batchperf.suite.plugin import add_matrix_options, matrix_settings


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tier", default="cpu", choices=sorted(TIERS), help="whose matrix (default: cpu)")

    def add_option(flag: str, **kwargs: Any) -> None:
        if flag != "--batchperf-rounds":  # a cell's runs here are the interleaved --repeats
            parser.add_argument(flag, **kwargs)

    add_matrix_options(add_option)
    parser.add_argument("--repeats", type=int, default=3, metavar="N",
                        help="interleaved runs of each backend per cell (default: 3)")
    parser.add_argument("--stat", choices=("best", "median"), default="best",
                        help="per backend: its best run (default; robust to busy neighbours) or the median, "
                             "with the median of the paired ratios")
    parser.add_argument("--threads", type=int, default=0, metavar="N",
                        help="torch threads (default: torch's choice; 1 is steadier on a shared machine)")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write every repeat's numbers here")


def main(args: argparse.Namespace) -> int:
    try:
        tier = narrowed(TIERS[args.tier], **matrix_settings(lambda dest: getattr(args, dest, None)))
    except ValueError as exc:
        raise SystemExit(f"batchperf versus: {exc}") from None
    names = list(tier.backends)
    problems = _bad_input(names, args)
    if problems:
        raise SystemExit("batchperf versus: " + "; ".join(problems))
    # vLLM logs to stdout at INFO by default; stdout is for the table (set before vLLM is first imported)
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    import torch

    from batchperf.suite.pool import BackendPool, ModelPool
    from batchperf.suite.versus import available_backends, format_table, run_versus, shared_cells

    if args.threads:
        torch.set_num_threads(args.threads)
    cells = shared_cells(tier, names)
    if not cells:
        raise SystemExit(f"batchperf versus: the {tier.name} tier has no cell that all of {', '.join(names)} run; "
                         "name the axes with --batchperf-batch-sizes, --batchperf-prompt-lens, --batchperf-concurrency")
    models, backends = ModelPool(), BackendPool()
    try:
        missing = available_backends(names, models, backends, cells)
        for name, reason in missing.items():
            print(f"{name}: not available: {reason}", file=sys.stderr)
        running = [n for n in names if n not in missing]
        if names[0] in missing or len(running) < 2:
            print(f"batchperf versus: nothing to compare: {_unavailable(missing)}")
            return 1
        results = run_versus(cells, running, models, backends, args.repeats,
                             done=lambda r: print(format_table([r], running, args.stat).splitlines()[-1],
                                                  file=sys.stderr, flush=True))
    finally:
        backends.close()
    print(f"# {tier.name} tier, {tier.num_prompts} prompts/run, output lengths {tier.output_lens}, "
          f"{args.stat} of {args.repeats} interleaved runs per backend, torch threads {torch.get_num_threads()}")
    print(format_table(results, running, args.stat))
    if missing:
        print(_unavailable(missing))
    errors = [f"error in {r.params.id}: {e}" for r in results for e in r.errors]
    for line in errors:
        print(line)
    if args.json:
        args.json.write_text(json.dumps({"tier": tier.name, "stat": args.stat, "repeats": args.repeats,
                                         "backends": running, "unavailable": missing,
                                         "cells": [r.to_dict() for r in results]}, indent=1))
    return 1 if errors else 0


def _bad_input(names: list[str], args: argparse.Namespace) -> list[str]:
    from batchperf.backends import backend_names

    problems = []
    if unknown := [n for n in names if n not in backend_names()]:
        problems.append(f"unknown backend(s) {', '.join(unknown)}; known: {', '.join(backend_names())}")
    if len(set(names)) < 2 or len(set(names)) != len(names):
        problems.append(f"--batchperf-backends needs two or more different backends (the first is the reference), "
                        f"got {','.join(names)}")
    if args.repeats < 1:
        problems.append(f"--repeats must be >= 1, got {args.repeats}")
    if args.threads < 0:
        problems.append(f"--threads must be >= 0, got {args.threads} (0: torch's choice)")
    return problems


def _unavailable(missing: dict[str, str]) -> str:
    return "; ".join(f"{name} not available: {reason}" for name, reason in missing.items())
