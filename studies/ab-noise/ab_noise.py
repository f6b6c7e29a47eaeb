#!/usr/bin/env python
"""Where a fresh-process pair's noise and seconds come from, on the detector's cells (issue 25, part 1).

For each cell (default the two of ``tools/ab_detector.py``: compute-bound hf-static bs8 p512 c16 and
dispatch-bound hf-static bs4 p64 c16) it runs ``--processes`` fresh processes (default 20) of ``--rounds``
measured rounds each (default 5), exactly as ``batchperf ab`` starts one (``batchperf.ab.designs.run_cells``: the
group guard, pytest on ``perf_tests`` with the same two plugins), cells interleaved process by process so a
drift of the machine hits both alike. Each process also loads ``batchperf.launch.phases``, which timestamps
its phases. Then it prints:

- **(a) the noise**: a one-way random-effects (ANOVA) decomposition of ln(output throughput) per round, with
  processes as groups: the sd between processes (a process's own level) and within a process (round to
  round), each with a 95% interval (between: a percentile bootstrap over processes; within: chi-square), and
  what they predict for a pair's sd of ln(B/A) and for the pairs 10 minutes buy at 1..R rounds a process;
- **(b) the seconds**: the median share of a process's wall seconds spent on spawning it (the guard), the
  interpreter's start and pytest's import, the plugins and conftest, collection, the model's build and the
  backend (fixture set-up), warm-up (and building the record), the measured rounds, and the end.

``--keep DIR`` keeps every process's files (results, junit, log, phases); running the same command again
resumes (finished processes are kept, an unfinished one is set aside); Ctrl-C keeps what finished and prints
the tables from it. ``--estimate-only`` prints them from DIR without measuring. On a quiet machine:

    OMP_NUM_THREADS=1 PYTHONPATH=src python studies/ab-noise/ab_noise.py --keep results/ab-noise
    OMP_NUM_THREADS=1 PYTHONPATH=src python studies/ab-noise/ab_noise.py --processes 3 --rounds 2 --cells dispatch \\
        --extra "--batchperf-num-prompts 8" --keep /tmp/ab-noise-smoke         # a smoke run (a minute or two)
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from batchperf.ab.designs import run_cells
from batchperf.ab.env import Environment, default_checkout
from batchperf.calibrate.cells import DETECTOR_CELLS  # the detector's cells: the same selection, one definition
from batchperf.launch.child import Stopped, stop_signals
from batchperf.launch.environ import PHASES_ENV
from batchperf.results.io import read_results

PHASES = ("spawn (guard)", "interpreter + pytest import", "plugins + conftest", "collection",
          "model build + backend (set-up)", "warm-up + record", "measured rounds", "teardown + session end", "exit")
METRIC = "output_throughput"


def stem_of(work: Path, kind: str, index: int) -> Path:
    return work / f"{kind}-{index:03d}"


def parse_variants(entries: list[str]) -> dict[str, tuple[tuple[str, str], ...]]:
    """``NAME:K=V,K=V`` -> {NAME: ((K, V), ...)}; the plain run is the variant "" (always measured)."""
    variants: dict[str, tuple[tuple[str, str], ...]] = {"": ()}
    for entry in entries:
        name, sep, rest = entry.partition(":")
        pairs = [item.partition("=") for item in rest.split(",") if item]
        if not sep or not name.isidentifier() or not pairs or any(not k or not eq for k, eq, _ in pairs):
            raise ValueError(f"--variant {entry!r}: expected NAME:K=V[,K=V], e.g. "
                             "jemalloc:LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2")
        variants[name] = tuple((k, v) for k, _, v in pairs)
    return variants


def kind_name(kind: str) -> str:
    """A measured kind is a cell kind, or ``CELL+VARIANT`` (the cell run with the variant's variables)."""
    cell, _, variant = kind.partition("+")
    return DETECTOR_CELLS[cell].name + (f" [{variant}]" if variant else "")


def done(stem: Path) -> bool:
    return all(stem.with_suffix(s).exists() for s in (".json", ".phases.json", ".run.json"))


def set_aside(stem: Path) -> None:
    """An unfinished process's files move to ``STEM.unfinished-TIME.*`` (run_cells refuses to write over them)."""
    tag = f"unfinished-{int(time.time())}"
    for path in stem.parent.glob(stem.name + ".*"):
        if ".unfinished-" not in path.name:
            path.rename(path.with_name(f"{stem.name}.{tag}{path.name[len(stem.name):]}"))


def measure_one(kind: str, index: int, args: argparse.Namespace, work: Path) -> str:
    stem = stem_of(work, kind, index)
    if done(stem):
        return "kept"
    set_aside(stem)
    cell, _, variant = kind.partition("+")
    env = Environment(kind, Path(sys.executable),
                      ((PHASES_ENV, str(stem.with_suffix(".phases.json"))), *args.variants[variant]), default_checkout())
    # the phases plugin first: everything before its import is the interpreter's start and pytest's own import
    pytest_args = ["-p", "batchperf.launch.phases", *DETECTOR_CELLS[cell].selection, *shlex.split(args.extra),
                   f"--batchperf-rounds={args.rounds}", "--batchperf-progress=off"]
    run = run_cells(env, pytest_args, stem, timeout_s=args.process_minutes * 60)
    if run.crashed or any(o.status in ("failed", "error") for o in run.outcomes.values()):  # (a skipped check is fine)
        raise RuntimeError(f"{kind} process {index} failed (exit {run.returncode}); see {run.log}:\n"
                           f"{run.log_tail()[-1500:]}")
    stem.with_suffix(".run.json").write_text(json.dumps({"started": run.started, "seconds": run.seconds}))
    return f"{run.seconds:.1f} s"


def load(stem: Path) -> tuple[list[float], dict[str, float]]:
    """A finished process: ln(throughput) of each measured round, and its seconds per phase."""
    (record,) = read_results(stem.with_suffix(".json")).records
    logs = [math.log(r[METRIC]) for r in record.rounds]
    raw = json.loads(stem.with_suffix(".json").read_text())
    measured = sum(b["stats"]["total"] for b in raw["benchmarks"])
    ph = json.loads(stem.with_suffix(".phases.json").read_text())
    run = json.loads(stem.with_suffix(".run.json").read_text())
    tests = ph["tests"]
    setup = sum(t["setup_end"] - t["setup_start"] for t in tests)
    call = sum(t["call_end"] - t["call_start"] for t in tests)
    start = ph.get("process_start") or run["started"]
    seconds = {
        "spawn (guard)": start - run["started"],
        "interpreter + pytest import": ph["plugin_imported"] - start,
        "plugins + conftest": ph["collection_start"] - ph["plugin_imported"],
        "collection": ph["collection_finish"] - ph["collection_start"],
        "model build + backend (set-up)": setup,
        "warm-up + record": call - measured,
        "measured rounds": measured,
        "teardown + session end": ph["unconfigure"] - ph["collection_finish"] - setup - call,
        "exit": run["started"] + run["seconds"] - ph["unconfigure"],
    }
    seconds["total"] = run["seconds"]
    return logs, seconds


def decompose(groups: list[list[float]]) -> dict[str, float]:
    """One-way random effects by ANOVA (unbalanced: n0): sd between groups and within, 0 when MSB < MSW."""
    sizes = np.array([len(g) for g in groups], dtype=float)
    k, total = len(groups), sizes.sum()
    grand = np.concatenate(groups).mean()
    means = np.array([np.mean(g) for g in groups])
    msb = float((sizes * (means - grand) ** 2).sum() / (k - 1))
    msw = float(sum(((np.asarray(g) - m) ** 2).sum() for g, m in zip(groups, means)) / (total - k))
    n0 = (total - (sizes ** 2).sum() / total) / (k - 1)
    return {"between": math.sqrt(max(msb - msw, 0.0) / n0), "within": math.sqrt(msw), "df_within": total - k}


def noise_table(work: Path, kinds: list[str], rounds: int, seed: int = 1) -> str:
    from scipy import stats

    rng = np.random.default_rng(seed)
    lines = ["| cell | processes x rounds | sd between processes [95%] | sd within a process (a round) [95%] "
             "| pair sd of ln(B/A) at 1 / 3 / 5 / 10 rounds |", "|---|---:|---:|---:|---:|"]
    for kind in kinds:
        groups = [load(s)[0] for s in finished(work, kind)]
        groups = [g for g in groups if len(g) >= 2]
        if len(groups) < 3:
            lines.append(f"| {kind_name(kind)} | {len(groups)} processes: too few (3 or more with 2+ rounds) | | | |")
            continue
        d = decompose(groups)
        boot = [decompose([groups[i] for i in rng.integers(len(groups), size=len(groups))])["between"]
                for _ in range(2000)]
        df = d["df_within"]
        w_low = d["within"] * math.sqrt(df / stats.chi2.ppf(0.975, df))
        w_high = d["within"] * math.sqrt(df / stats.chi2.ppf(0.025, df))
        pair = " / ".join(f"{math.sqrt(2 * (d['between'] ** 2 + d['within'] ** 2 / r)):.3f}" for r in (1, 3, 5, 10))
        lines.append(f"| {kind_name(kind)} | {len(groups)} x {statistics.median(len(g) for g in groups):g} "
                     f"| {d['between']:.3f} [{np.percentile(boot, 2.5):.3f}, {np.percentile(boot, 97.5):.3f}] "
                     f"| {d['within']:.3f} [{w_low:.3f}, {w_high:.3f}] | {pair} |")
    return "\n".join(lines)


def seconds_table(work: Path, kinds: list[str]) -> str:
    lines = ["| cell | processes | median seconds | " + " | ".join(PHASES) + " |",
             "|---|---:|---:|" + "---:|" * len(PHASES)]
    for kind in kinds:
        rows = [load(s)[1] for s in finished(work, kind)]
        if not rows:
            continue
        shares = [statistics.median(r[p] / r["total"] for r in rows) for p in PHASES]
        lines.append(f"| {kind_name(kind)} | {len(rows)} | {statistics.median(r['total'] for r in rows):.1f} | "
                     + " | ".join(f"{s:.1%}" for s in shares) + " |")
    return "\n".join(lines)


def design_table(work: Path, kinds: list[str], minutes: float = 10.0) -> str:
    """Rounds per process that minimise the sd of the mean ln(B/A) a budget of ``minutes`` buys (sequential pairs):
    a process costs its fixed seconds plus ``r`` times a round's; the mean over P pairs has variance
    2 (between² + within²/r) / P."""
    lines = ["| cell | fixed s a process | s a round | rounds: pairs in 10 min, sd of the mean ln(B/A) |",
             "|---|---:|---:|---|"]
    for kind in kinds:
        loaded = [load(s) for s in finished(work, kind)]
        groups = [g for g, _ in loaded if len(g) >= 2]
        if len(groups) < 3:
            continue
        d = decompose(groups)
        per_round = statistics.median(s["measured rounds"] / len(g) for g, s in loaded)
        fixed = statistics.median(s["total"] - s["measured rounds"] for _, s in loaded)
        cells = []
        for r in (1, 2, 3, 5, 10):
            pairs = minutes * 60 / (2 * (fixed + r * per_round))
            cells.append(f"{r}: {pairs:.0f}, {math.sqrt(2 * (d['between'] ** 2 + d['within'] ** 2 / r) / pairs):.4f}")
        lines.append(f"| {kind_name(kind)} | {fixed:.1f} | {per_round:.2f} | {'; '.join(cells)} |")
    return "\n".join(lines)


def finished(work: Path, kind: str) -> list[Path]:
    """The stems of the finished processes of ``kind`` in ``work`` (set-aside ones are not read)."""
    stems = (p.with_name(p.name.removesuffix(".run.json")) for p in work.glob(f"{kind}-[0-9][0-9][0-9].run.json"))
    return sorted(stem for stem in stems if done(stem))


def report(work: Path, kinds: list[str], rounds: int) -> None:
    print("\n(a) sd of ln(output throughput), one-way random effects over processes:\n")
    print(noise_table(work, kinds, rounds))
    print("\n(b) share of a process's wall seconds (median over processes):\n")
    print(seconds_table(work, kinds))
    print("\nrounds per process for a 10-minute budget (from (a) and (b); lower sd is better):\n")
    print(design_table(work, kinds))
    print(f"\nevery process's files in {work}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--processes", type=int, default=20, help="fresh processes per cell (default 20)")
    parser.add_argument("--rounds", type=int, default=5, help="measured rounds per process (default 5)")
    parser.add_argument("--cells", default="compute,dispatch", help=f"cell kinds, of {', '.join(DETECTOR_CELLS)}")
    parser.add_argument("--extra", default="", metavar="ARGS", help="more pytest arguments for every process")
    parser.add_argument("--variant", action="append", default=[], metavar="NAME:K=V[,K=V]",
                        help="also measure each cell with these variables set (repeatable), interleaved process by "
                             "process with the plain run: e.g. jemalloc:LD_PRELOAD=/usr/lib/x86_64-linux-gnu/"
                             "libjemalloc.so.2 or thp:THP_MEM_ALLOC_ENABLE=1; reported as CELL [NAME]")
    parser.add_argument("--process-minutes", type=float, default=15.0, help="a process longer than this hangs")
    parser.add_argument("--keep", type=Path, default=None, help="keep (and resume from) every process's files here")
    parser.add_argument("--estimate-only", action="store_true", help="measure nothing: the tables from --keep DIR")
    args = parser.parse_args()
    kinds = [k.strip() for k in args.cells.split(",") if k.strip()]
    if unknown := [k for k in kinds if k not in DETECTOR_CELLS]:
        parser.error(f"unknown cell kind(s) {unknown}; known: {', '.join(DETECTOR_CELLS)}")
    try:
        args.variants = parse_variants(args.variant)
    except ValueError as exc:
        parser.error(str(exc))
    kinds = [f"{k}+{v}" if v else k for k in kinds for v in args.variants]
    if args.processes < 3 or args.rounds < 2:
        parser.error("--processes 3 or more and --rounds 2 or more: the decomposition needs both levels")
    if args.estimate_only and args.keep is None:
        parser.error("--estimate-only reads --keep DIR; give it")
    import tempfile

    work = args.keep or Path(tempfile.mkdtemp(prefix="batchperf-ab-noise-"))
    work.mkdir(parents=True, exist_ok=True)
    code = 0
    wanted = {"rounds": args.rounds, "extra": args.extra, **({"variants": args.variant} if args.variant else {})}  # what a kept process must have been measured with
    recorded = work / "settings.json"
    if recorded.exists() and (kept := json.loads(recorded.read_text())) != wanted and not args.estimate_only:
        parser.error(f"{work} holds processes measured with {kept}; give the same --rounds/--extra to resume, "
                     "or another --keep folder")
    if not args.estimate_only:
        recorded.write_text(json.dumps(wanted))
        plan = [(i, kind) for i in range(args.processes) for kind in kinds]
        began = time.monotonic()
        try:
            with stop_signals():
                for n, (i, kind) in enumerate(plan, 1):
                    what = measure_one(kind, i, args, work)
                    print(f"[{n}/{len(plan)}] {kind} process {i + 1}: {what}  "
                          f"[{(time.monotonic() - began) / 60:.1f} min]", flush=True)
        except Stopped as exc:
            print(f"ab_noise: interrupted; the finished processes are kept in {work}", file=sys.stderr)
            code = exc.exit_code
        except RuntimeError as exc:
            print(f"ab_noise: {exc}", file=sys.stderr)
            code = 1
    report(work, kinds, args.rounds)
    return code


if __name__ == "__main__":
    sys.exit(main())
