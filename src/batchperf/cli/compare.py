"""``batchperf compare A.json B.json``: per-cell changes of every metric with the gate's verdicts.

A is the reference (a baseline or an earlier results file), B the new run. It
prints a terminal table (rich) and, with ``--markdown``, the same as Markdown
for a CI job summary (``--markdown "$GITHUB_STEP_SUMMARY"``). Exit codes: see ``ERROR`` below.
``--hardware``: A and B ran on two machines; per cell the measured speed-up beside what the hardware predicts for
the cell's bound (:mod:`batchperf.regress.hardware`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import NoReturn

from batchperf.regress.compare import (
    add_gate_args,
    compare_files,
    extra_rows,
    gate_config,
    make_console,
    render_compare_markdown,
    render_rich,
)
from batchperf.regress.gate import GateConfig
from batchperf.regress.store import fingerprint_of, load_reference, load_run
from batchperf.results.io import ResultsFile


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("a", type=Path, metavar="A.json", help="reference: a baseline.json or a results file")
    parser.add_argument("b", type=Path, metavar="B.json", help="the new results file")
    parser.add_argument("--markdown", nargs="?", const="-", default=None, metavar="FILE",
                        help="also write Markdown (to FILE, appended; '-' or no value: stdout)")
    parser.add_argument("--all-metrics", action="store_true",
                        help="also list every other numeric metric (no verdict: the gate does not judge it)")
    parser.add_argument("--fail-on-regression", action="store_true",
                        help="exit 1 when any cell regressed (with --hardware: when any cell lost efficiency)")
    parser.add_argument("--hardware", action="store_true",
                        help="A and B ran on two machines: per cell the measured speed-up beside what the machine "
                             "probes (or the GPU's roofline) predict for the cell's bound, and whether it scaled "
                             "(docs/baselines.md, 'A hardware upgrade judged')")
    add_gate_args(parser)


# Exit codes (docs/baselines.md): 0 compared; 1 only with --fail-on-regression, when a cell regressed; 2 a usage
# or input error (as argparse's own): no verdict, so a CI step never reads a broken file as a regression.
ERROR = 2


def refuse(problem: str) -> NoReturn:
    print(f"batchperf compare: {problem}", file=sys.stderr)
    raise SystemExit(ERROR)


def main(args: argparse.Namespace) -> int:
    if args.markdown not in (None, "-") and not Path(args.markdown).parent.is_dir():
        refuse(f"--markdown {args.markdown}: cannot write it (No such file or directory: "
               f"{Path(args.markdown).parent}); create the folder first, or give '-' for stdout")
    try:
        config = gate_config(args.batchperf_k, args.batchperf_tolerance, args.batchperf_machine_moved)
        a, b = load_reference(args.a), load_run(args.b)
    except ValueError as exc:
        refuse(str(exc))
    if args.hardware:
        return hardware(args, a, b, config)
    verdicts = compare_files(a, b, config)
    extras = {v.name: extra_rows(a, b, v, config) for v in verdicts} if args.all_metrics else None
    if fingerprint_of(a) is None or fingerprint_of(b) is None:
        print("note: a file has no batchperf fingerprint (machine_info.batchperf): hardware identity not checked")
    for run in (a, b):
        if why := run.incomplete:
            print(f"note: {run.path} is from an incomplete run ({why})")
    render_rich(verdicts, make_console(), extras, title=f"{args.a} → {args.b}")
    if args.markdown is not None:
        text = render_compare_markdown(verdicts, args.a, args.b, extras)
        if args.markdown == "-":
            print(text)
        else:
            append_markdown(args.markdown, text)
    failed = any(v.failed for v in verdicts)
    return 1 if failed and args.fail_on_regression else 0


def append_markdown(path: str, text: str) -> None:
    """``--markdown FILE``: the table appended (a CI job summary collects several)."""
    try:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(text + "\n")
    except OSError as exc:
        refuse(f"--markdown {path}: cannot write it ({exc.strerror}); give a writable file, or '-' for stdout (the "
               "table above is the comparison)")


def hardware(args: argparse.Namespace, a: ResultsFile, b: ResultsFile, config: GateConfig) -> int:
    """``--hardware``: the scaling table (Markdown) on stdout, and appended to ``--markdown FILE``."""
    from batchperf.regress.hardware import LOST, compare_hardware, render_hardware_markdown, setup_notes

    try:
        rows = compare_hardware(a, b, config)
    except ValueError as exc:  # a malformed machine probe block, naming the file
        refuse(str(exc))
    for label, run in (("A", a), ("B", b)):
        found = fingerprint_of(run)
        print(f"{label}: {run.path}: {found.identity.describe() if found else 'no batchperf fingerprint'}")
    text = render_hardware_markdown(rows, str(args.a), str(args.b), setup_notes(a, b))
    print(text)
    if args.markdown not in (None, "-"):
        append_markdown(args.markdown, text)
    return 1 if args.fail_on_regression and any(r.verdict == LOST for r in rows) else 0
