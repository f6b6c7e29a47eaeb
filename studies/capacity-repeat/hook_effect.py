"""What the slowdown hook does to the capacity cell: the sustained-tenants cell at one load and saturated (the
reference), with ``BATCHPERF_INJECT_SLOWDOWN`` at each level, interleaved, in rounds. Each run is one probe
exactly as ``batchperf capacity`` runs it (``batchperf.capacity.probe.Probes.command``).

    PYTHONPATH=src OMP_NUM_THREADS=1 python studies/capacity-repeat/hook_effect.py --load 5 --levels 0,0.04,0.1 \
        --reps 3 --out studies/capacity-repeat/data/hook-effect.json
    PYTHONPATH=src python studies/capacity-repeat/hook_effect.py --summary studies/capacity-repeat/data/hook-effect.json

Per run it keeps, for the probe load and the reference: attainment, the request and output rates, the engine's
steps and the mean time of a step (the round's duration ÷ its steps), and each tenant's p50/p90 TTFT, TPOT and
E2EL with its attainment. The summary prints each level's medians and their ratio to level 0.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from batchperf.capacity.probe import Probes
from batchperf.capacity.search import REFERENCE_LOAD
from batchperf.launch.environ import INJECT_SLOWDOWN_ENV
from batchperf.results.io import read_results

ROOT = Path(__file__).resolve().parents[2]
OPTIONS = {"batchperf_backends": "continuous", "batchperf_batch_sizes": "4", "batchperf_prompt_lens": "64",
           "batchperf_concurrency": "64", "batchperf_rounds": "1",
           "batchperf_workloads": "tenants:fixtures/traffic/sustained_tenants.toml"}
TENANT_FIGURES = ("attainment", "median_ttft_ms", "p90_ttft_ms", "median_tpot_ms", "p90_tpot_ms", "p90_e2el_ms")


def figures(record) -> dict[str, object]:
    m, slo, counters = record.metrics, record.slo, record.counters
    steps = counters.get("engine_steps") or 0
    out = {"attainment": slo["attainment"], "offered": slo["offered"], "duration_s": m["duration"],
           "request_rate": m["completed"] / m["duration"], "output_throughput": m["output_throughput"],
           "engine_steps": steps, "step_ms": 1e3 * m["duration"] / steps if steps else None,
           "tokens_per_step": counters.get("iteration_tokens_mean")}
    out["tenants"] = {name: {k: t.get(k) for k in TENANT_FIGURES} for name, t in record.tenants.items()}
    return out


def one_run(load: float, level: float, folder: Path) -> dict[str, object]:
    probes = Probes(suite=ROOT / "perf_tests", tier="cpu", options=OPTIONS, passthrough=(), folder=folder)
    out = folder / f"load{load:g}-hook{level:g}-{time.time_ns()}.json"
    env = dict(os.environ)
    env.pop(INJECT_SLOWDOWN_ENV, None)
    if level:
        env[INJECT_SLOWDOWN_ENV] = f"{level:g}"
    started = time.time()
    proc = subprocess.run(probes.command(load, out), cwd=ROOT, env=env, capture_output=True, text=True)
    if not out.exists():
        sys.exit(f"the run at hook {level} wrote no results (exit {proc.returncode}):\n{proc.stdout[-2000:]}")
    records = read_results(out).records
    by_load = {r.load: r for r in records}
    return {"level": level, "load": load, "started": started, "probe": figures(by_load[load]),
            "reference": figures(by_load[REFERENCE_LOAD])}


def summary(path: Path) -> None:
    runs = json.loads(path.read_text())["runs"]
    levels = sorted({r["level"] for r in runs})
    rows = [("reference", "request_rate"), ("reference", "step_ms"), ("reference", "tokens_per_step"),
            ("probe", "attainment"), ("probe", "step_ms"), ("probe", "engine_steps"), ("probe", "request_rate")]
    base = {}
    print(f"{'figure':34}" + "".join(f"{'hook ' + format(v, 'g'):>22}" for v in levels))
    for side, key in rows:
        cells = []
        for v in levels:
            vals = [r[side][key] for r in runs if r["level"] == v and r[side][key] is not None]
            med = statistics.median(vals)
            base.setdefault((side, key), med)
            cells.append(f"{med:10.4g} ({med / base[side, key] - 1:+6.1%})")
        print(f"{side + ' ' + key:34}" + "".join(f"{c:>22}" for c in cells))
    tenants = sorted(runs[0]["probe"]["tenants"])
    for tenant in tenants:
        for key in TENANT_FIGURES:
            cells = []
            for v in levels:
                vals = [r["probe"]["tenants"][tenant][key] for r in runs if r["level"] == v]
                vals = [x for x in vals if x is not None]
                med = statistics.median(vals) if vals else float("nan")
                base.setdefault((tenant, key), med)
                rel = med / base[tenant, key] - 1 if base[tenant, key] else float("nan")
                cells.append(f"{med:10.4g} ({rel:+6.1%})")
            print(f"{'probe ' + tenant + ' ' + key:34}" + "".join(f"{c:>22}" for c in cells))


def study_args(doc: str, reps: int, summarise: Callable[[Path], None],
               more: Callable[[argparse.ArgumentParser], None] = lambda parser: None,
               ) -> tuple[argparse.Namespace, list[float]] | None:
    """The hook studies' command line (this one's and ``hook_inproc.py``'s): ``--levels``, ``--reps``, ``--out``,
    ``--summary`` and ``more``'s; None when ``--summary`` printed a written file's summary, else the arguments and
    the levels, the first the unhooked one (0)."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--levels", default="0,0.04,0.1", help="hook levels, the first the unhooked one (0)")
    parser.add_argument("--reps", type=int, default=reps)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--summary", type=Path, help="print the summary of a written file and stop")
    more(parser)
    args = parser.parse_args()
    if args.summary:
        summarise(args.summary)
        return None
    if args.out is None:
        parser.error("--out FILE is needed to run")
    levels = [float(x) for x in args.levels.split(",")]
    if levels[0] != 0:
        parser.error("--levels: the first level is the unhooked one, 0")
    return args, levels


def main() -> None:
    given = study_args(__doc__, 3, summary, lambda parser: parser.add_argument("--load", type=float, default=5.0))
    if given is None:
        return
    args, levels = given
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.reps):
            order = levels if rep % 2 == 0 else levels[::-1]
            for level in order:
                run = one_run(args.load, level, Path(tmp))
                runs.append(run)
                print(f"rep {rep + 1} hook {level:g}: attainment {run['probe']['attainment']:.3f}, reference "
                      f"{run['reference']['request_rate']:.1f} req/s, step {run['reference']['step_ms']:.2f} ms",
                      flush=True)
                args.out.write_text(json.dumps({"load": args.load, "levels": levels, "runs": runs}, indent=1))
    summary(args.out)


if __name__ == "__main__":
    main()
