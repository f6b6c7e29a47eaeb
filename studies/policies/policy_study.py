"""Issue 27's study: each batching policy's SLO attainment against offered load, beside the static envelope.

For each traffic (a tenants file: ``TRAFFIC`` below, each with its loads), the `continuous` backend runs, open
loop, at every load factor:

- the **static caps**: ``fcfs`` at batch sizes 1, 2, 4, 8, 16 (each measured, not assumed);
- the **policies**: ``seed``, ``aimd``, ``priority``, ``fair`` at batch size 16, their largest cap (the steady
  one-tenant traffic runs ``seed`` and ``aimd`` only; the backlogged pair ``fcfs`` at 16 and ``fair``).

**Side by side.** This machine drifts (the same cell read 54% in one run and 84% in another minutes later), so
every series of a traffic at one load runs in ONE pytest process, and that process is repeated ``--repeats`` times
with the cells' order alternating (forward, reversed, forward, ...) so a drift within a run falls on both ends
alike. The cells are named by their pytest node ids (collected once through the same options), which pytest runs
in command-line order. Each run leaves ``OUT/<traffic>-load<x>-r<k>.json`` and is not run again (delete it to
re-measure), so an interrupted study resumes where it stopped.

**The report.** Per series and load: the median attainment over every round of every repeat (each round's
recomputed from its trace) and the spread [min–max] of the repeats' values (a cell's value: its rounds' median). The **static envelope** of a repeat at a load is
the best static cap in THAT repeat; the targets are judged on paired differences, repeat by repeat (aimd −
envelope; aimd − the repeat's best single static cap; priority where that repeat's fcfs drops the interactive
tenant below 80%; fair's Jain's index), and MET only when every repeat meets it. The tool prints a table per
traffic, the targets with their numbers, and draws attainment against load (``OUT/<traffic>.png``).

Loads are factors of the tenants file's own rates; ``--loads`` takes them as given. It runs in the checkout it
belongs to from any folder (``--out`` is taken from where you are; paths in the pytest arguments after ``--`` from
the checkout's root). Measure on a quiet machine:

    OMP_NUM_THREADS=1 PYTHONPATH=src python studies/policies/policy_study.py --out results/policy-study
    PYTHONPATH=src python studies/policies/policy_study.py --out results/policy-study --report-only   # tables, plots, targets
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from batchperf.measure.metrics import SLO
from batchperf.measure.slo import attainment
from batchperf.measure.trace import RunTrace
from batchperf.results.io import read_results

STATIC_CAPS = (1, 2, 4, 8, 16)
POLICIES = ("fcfs", "seed", "aimd", "priority", "fair")
SUITE = Path("perf_tests")
ROOT = Path(__file__).resolve().parents[2]  # the checkout: the study runs there, whatever the folder it is run from
RESULT = re.compile(r"^(?P<name>[a-z_]+)-load(?P<load>[0-9.]+)-r(?P<repeat>[0-9]+)\.json$")
OLD_STYLE = ("static", "policies")  # the two-run layout before the study went side by side

Series = dict[str, dict[float, dict[int, dict[str, Any]]]]  # series -> load -> repeat -> row


@dataclass(frozen=True)
class Traffic:
    file: str  # the tenants file
    what: str  # the targets on it
    loads: str  # load factors swept (× the file's rates): about 0.5× to 2× fcfs's capacity at cap 16
    caps: tuple[int, ...] = STATIC_CAPS  # the static caps measured (fcfs at each batch size)
    policies: tuple[str, ...] = POLICIES[1:]  # the policies measured at the largest cap
    model: str | None = None  # the model (--batchperf-models); None: the cpu tier's own (tiny-qwen2)


TRAFFIC = {
    "poisson": Traffic("fixtures/traffic/poisson_one.toml",
                       "steady Poisson: aimd within 3 points of the static envelope at every load",
                       "1.5,2.5,3.5,5,7", policies=("seed", "aimd")),
    "bursty": Traffic("fixtures/traffic/bursty_tenants.toml",
                      "two bursty tenants: aimd >= 5 points above the best single static cap; priority keeps the "
                      "interactive tenant >= 95% where fcfs drops it below 80%",
                      "1,1.25,1.5,2"),
    "bursty_small": Traffic("fixtures/traffic/bursty_tenants_small.toml",
                            "two bursty tenants on small-qwen2, whose step grows with the batch (8 ms at 1 request, "
                            "~45 at 16): aimd >= 5 points above the best single static cap",
                            "2,3", caps=(4, 8, 16), policies=("aimd",), model="small-qwen2"),
    "backlogged": Traffic("fixtures/traffic/heavy_light.toml",
                          "two backlogged tenants, one heavier: fair keeps Jain's index >= 0.9 where fcfs does not",
                          "4,8", caps=(16,), policies=("fair", "fair:tenant_cap=8")),
}


# ---- measuring: one process per (traffic, load, repeat), the cells in alternating order ----

def cell_order(cells: Sequence[str], repeat: int) -> list[str]:
    """The cells in the order repeat ``repeat`` (from 0) runs them: forward, reversed, forward, ..."""
    return list(cells) if repeat % 2 == 0 else list(reversed(cells))


def result_path(out: Path, name: str, load: str, repeat: int) -> Path:
    """``OUT/<traffic>-load<x>-r<k>.json``, k counted from 1."""
    return out / f"{name}-load{load}-r{repeat + 1}.json"


def matrix_options(traffic: Traffic, load: str, caps: Sequence[int], policies: Sequence[str]) -> dict[str, list[str]]:
    """`batchperf run` options of the static cells (fcfs at each cap), of the policies' (at the largest cap), and
    of both at once (the run, which names the cells it wants)."""
    common = ["--batchperf-backends=continuous", f"--batchperf-workloads=tenants:{traffic.file}",
              f"--batchperf-load={load}", "--batchperf-concurrency=256", "--batchperf-prompt-lens=64",
              *([f"--batchperf-models={traffic.model}"] if traffic.model else [])]
    every_cap = sorted({*caps, max(STATIC_CAPS)})
    every_policy = list(dict.fromkeys(["fcfs", *policies]))
    return {
        "static": [*common, "--batchperf-policies=fcfs", f"--batchperf-batch-sizes={','.join(map(str, caps))}"],
        "policies": [*common, f"--batchperf-policies={','.join(policies)}",
                     f"--batchperf-batch-sizes={max(STATIC_CAPS)}"],
        "both": [*common, f"--batchperf-policies={','.join(every_policy)}",
                 f"--batchperf-batch-sizes={','.join(map(str, every_cap))}"],
    }


def pytest_command(options: list[str], out: Path, extra: list[str]) -> list[str]:
    """`batchperf run`'s own pytest command line for these options (``launch.suite.tier_command``), without its
    suite folder: `batchperf run` always passes the folder, which would collect every cell in pytest's order; the
    caller names the cells instead."""
    from batchperf.cli.run import add_cli_args
    from batchperf.launch.suite import tier_command

    parser = argparse.ArgumentParser()
    add_cli_args(parser)
    args = parser.parse_args(["--tier", "cpu", f"--suite={SUITE}", *options, "--", *extra])
    return tier_command(args.tier, vars(args), out, suite=None, passthrough=args.pytest_args)


def collect(options: list[str], extra: list[str]) -> list[str]:
    """The node ids of the cells these options select, in pytest's order."""
    from batchperf.launch.child import run_guarded

    cmd = pytest_command(options, Path("collect-only.json"), [*extra, str(SUITE), "--collect-only", "-q"])
    with tempfile.TemporaryFile("w+", encoding="utf-8") as fh:
        code = run_guarded(cmd, stdout=fh, foreground=True).returncode
        fh.seek(0)
        output = fh.read()
    ids = [line.strip() for line in output.splitlines()
           if line.startswith(f"{SUITE}/") and "::" in line]
    if code != 0 or not ids:
        raise SystemExit(f"policy_study: collecting the cells failed (exit {code}):\n  {' '.join(cmd)}\n"
                         f"{output[-4000:]}")
    return ids


def run_repeat(path: Path, options: list[str], cells: list[str], extra: list[str]) -> None:
    """One pytest process: ``cells`` in that order, into ``path``."""
    from batchperf.launch.child import run_guarded

    cmd = pytest_command(options, path, [*extra, *cells])
    print(f"policy_study: {path.name}: {len(cells)} cells in this order:\n  " + "\n  ".join(cells), flush=True)
    started = time.monotonic()
    code = run_guarded(cmd, foreground=True).returncode
    print(f"policy_study: {path.name}: pytest exit {code} after {time.monotonic() - started:.0f} s", flush=True)
    if not path.exists():
        raise SystemExit(f"policy_study: {path.name} wrote no results (exit {code}); run this alone:\n  "
                         + " ".join(cmd))


def measure(out: Path, name: str, traffic: Traffic, loads: Sequence[str], caps: tuple[int, ...],
            policies: tuple[str, ...], repeats: int, extra: list[str]) -> list[tuple[int, Path]]:
    """Every (load, repeat) run of one traffic that is not in OUT yet; (repeat, file) of every one."""
    done = []
    for load in loads:
        paths = [result_path(out, name, load, r) for r in range(repeats)]
        for path in paths:
            if path.exists():
                print(f"policy_study: {path} kept (delete it to measure again)", flush=True)
        if not all(p.exists() for p in paths):
            options = matrix_options(traffic, load, caps, policies)
            cells = list(dict.fromkeys(collect(options["static"], extra) + collect(options["policies"], extra)))
            for repeat, path in enumerate(paths):
                if not path.exists():
                    run_repeat(path, options["both"], cell_order(cells, repeat), extra)
        done += list(enumerate(paths))
    return done


def stored(out: Path, name: str) -> list[tuple[int, Path]]:
    """(repeat from 0, file) of every run of traffic ``name`` in OUT; refuses the old two-run layout."""
    old = [out / f"{name}-{what}.json" for what in OLD_STYLE if (out / f"{name}-{what}.json").exists()]
    if old:
        raise SystemExit(f"policy_study: {', '.join(map(str, old))}: results of the old layout (static caps and "
                         f"policies as two runs minutes apart), which this study no longer compares; move them out "
                         f"of {out} (e.g. into {out / 'two-runs'}) or use another --out")
    found = []
    for path in sorted(out.glob(f"{name}-load*-r*.json")):
        if (m := RESULT.match(path.name)) and m["name"] == name:
            found.append((int(m["repeat"]) - 1, path))
    return found


# ---- reading and judging ----

def round_attainments(record: Any) -> list[float]:
    """Each measured round's overall attainment, recomputed from its stored trace as the cell computed it
    (measure.slo: the workload's SLOs, what it offered per tenant); the record's keeps only the median over rounds.
    Without traces (or SLOs), the cell's median alone."""
    slos = {name: SLO(**slo) for name, slo in (record.raw("workload.slos") or {}).items()}
    offered = {name: block["offered"] for name, block in (record.raw("tenants") or {}).items() if "offered" in block}
    traces = record.traces
    if not slos or not traces:
        return [] if record.raw("slo.attainment") is None else [record.raw("slo.attainment")]
    return [attainment(RunTrace.from_dict(t), slos, offered or None).ratio for t in traces]


def rows(paths: Iterable[tuple[int, Path]]) -> list[dict[str, Any]]:
    """One row per measured cell and repeat: its policy, cap, load, attainment (overall, per tenant), fairness."""
    out = []
    for repeat, path in paths:
        for record in read_results(path, "study results").records:
            tenants = record.raw("tenants") or {}
            out.append({
                "repeat": repeat,
                "policy": record.raw("policy.label") or record.raw("policy.name") or "fcfs",
                "cap": record.batch_size,
                "load": float(record.raw("workload.load") or record.raw("cell.load") or 1.0),
                "attainment": record.raw("slo.attainment"),  # the median over the cell's rounds
                "rounds": round_attainments(record),
                "tenants": {t: v.get("attainment") for t, v in tenants.items()},
                "jain": record.raw("slo.jain_fairness"),
                "starved": record.raw("slo.starved_tenants"),
                "state": {k: v for k, v in (record.raw("policy") or {}).items()
                          if k not in ("name", "text", "label", "params", "engine")},
                "id": record.id,
            })
    return out


def by_series(data: list[dict[str, Any]]) -> Series:
    """Rows by series ("static 4", "aimd"; fcfs at the largest cap is both "static 16" and "fcfs"), load, repeat."""
    series: Series = defaultdict(lambda: defaultdict(dict))
    for row in data:
        keys = [row["policy"]]
        if row["policy"] == "fcfs":
            keys = [f"static {row['cap']}"] + (["fcfs"] if row["cap"] == max(STATIC_CAPS) else [])
        for key in keys:
            series[key][row["load"]][row["repeat"]] = row
    return series


def envelopes(series: Series) -> dict[int, dict[float, float]]:
    """Per repeat, the static envelope at each load: the best static cap measured in that repeat."""
    out: dict[int, dict[float, float]] = defaultdict(dict)
    for c in STATIC_CAPS:
        for x, per in series.get(f"static {c}", {}).items():
            for r, row in per.items():
                out[r][x] = max(out[r].get(x, 0.0), row["attainment"] or 0.0)
    return dict(out)


def spread(values: Sequence[float | None]) -> tuple[float, float, float] | None:
    """(median, min, max) of the values present; None without any."""
    vs = [v for v in values if v is not None]
    return (statistics.median(vs), min(vs), max(vs)) if vs else None


def pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f}"


def with_spread(values: Sequence[float | None], pooled: Sequence[float] | None = None) -> str:
    """``median [min–max]`` of the values (one a repeat); the median of ``pooled`` instead when given (every
    round of every repeat)."""
    s = spread(values)
    if s is None:
        return "—"
    med, lo, hi = s
    if pooled:
        med = statistics.median(pooled)
    return pct(med) + (f" [{pct(lo)}–{pct(hi)}]" if len([v for v in values if v is not None]) > 1 else "")


def table(name: str, data: list[dict[str, Any]]) -> tuple[str, dict[int, dict[float, float]], Series]:
    """Markdown table (median over repeats [min–max of the repeats]); the per-repeat envelopes; the rows by
    series, load and repeat."""
    series = by_series(data)
    env = envelopes(series)
    loads = sorted({row["load"] for row in data})
    tenants = sorted({t for row in data for t in row["tenants"]})
    repeats = sorted({row["repeat"] for row in data})
    lines = [f"### {name} ({len(repeats)} repeats)", "",
             "| series | " + " | ".join(f"load {x:g}" for x in loads) + " |", "|---|" + "---:|" * len(loads)]
    names = [f"static {c}" for c in STATIC_CAPS if f"static {c}" in series] + sorted(
        k for k in series if not k.startswith("static") and k != "fcfs")
    for key in names:
        cells = []
        for x in loads:
            per = list(series[key].get(x, {}).values())
            if not per:
                cells.append("—")
                continue
            cell = with_spread([r["attainment"] for r in per], [a for r in per for a in r.get("rounds", ())])
            if len(tenants) > 1:
                cell += " (" + "/".join(pct((spread([r["tenants"].get(t) for r in per]) or (None,))[0])
                                        for t in tenants) + ")"
                if (jain := spread([r["jain"] for r in per])) is not None:
                    cell += f" J{jain[0]:.2f}"
            if any(r["starved"] for r in per):
                cell += " STARVED"
            cells.append(cell)
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
    lines.append("| **envelope** (per repeat) | " + " | ".join(
        with_spread([env[r].get(x) for r in repeats if r in env]) for x in loads) + " |")
    lines += ["", "Cells: attainment %, the median over every round of every repeat [min–max of the repeats' "
              "medians]" + (f"; (per tenant: {' / '.join(tenants)}, the median of the repeats'), J = Jain's index "
                            "(the median of the repeats')" if len(tenants) > 1 else "") + "; the envelope: the "
              "median [min–max] of the repeats' envelopes."]
    return "\n".join(lines), env, series


def paired(diffs: dict[float, list[float]], floor: float, what: str) -> str:
    """A target on paired differences (one per repeat, by load): MET only when every repeat's is >= ``floor``."""
    missing = [x for x, d in diffs.items() if not d]
    listed = ", ".join(f"{x:g}: median {pct(statistics.median(d))} [{pct(min(d))}, {pct(max(d))}] over {len(d)}"
                       for x, d in diffs.items() if d)
    if not diffs or missing:
        return f"{what}: NOT JUDGED (no pair at load {', '.join(f'{x:g}' for x in missing) or 'any'}); {listed}"
    if all(min(d) >= floor for d in diffs.values()):
        verdict = "MET in every repeat"
    elif all(statistics.median(d) >= floor for d in diffs.values()):
        verdict = "NOT MET in every repeat (the medians meet it; the repeats' spread does not support it)"
    else:
        verdict = "NOT MET"
    return f"{what}: {verdict} (points, by load: {listed})"


def diffs_by_load(a: dict[float, dict[int, float | None]], b: dict[float, dict[int, float | None]]
                  ) -> dict[float, list[float]]:
    """Per load, a − b in each repeat that measured both."""
    return {x: [a[x][r] - b[x][r] for r in sorted(a[x]) if a[x][r] is not None and b.get(x, {}).get(r) is not None]
            for x in sorted(a)}


def attainments(series: Series, key: str, tenant: str | None = None) -> dict[float, dict[int, float | None]]:
    return {x: {r: row["attainment"] if tenant is None else row["tenants"].get(tenant) for r, row in per.items()}
            for x, per in series.get(key, {}).items()}


def best_static(series: Series, repeat: int, loads: Sequence[float]) -> tuple[int, float] | None:
    """The static cap with the best mean attainment over ``loads`` in one repeat (only caps measured at them all)."""
    means = {}
    for c in STATIC_CAPS:
        per = series.get(f"static {c}", {})
        values = [per.get(x, {}).get(repeat, {}).get("attainment") for x in loads]
        if values and all(v is not None for v in values):
            means[c] = sum(values) / len(values)
    if not means:
        return None
    best = max(means, key=means.__getitem__)
    return best, means[best]


def judge(name: str, env: dict[int, dict[float, float]], series: Series) -> list[str]:
    """The issue's targets that apply to this traffic, each judged repeat by repeat, with its numbers."""
    out = []
    aimd = attainments(series, "aimd")
    if name == "poisson" and aimd:
        envelope = {x: {r: e[x] for r, e in env.items() if x in e} for x in aimd}
        out.append(paired(diffs_by_load(aimd, envelope), -0.03, "aimd within 3 points of the envelope at every "
                          "load (aimd − that repeat's envelope)"))
    if name in ("bursty", "bursty_small") and aimd:
        loads = sorted(aimd)
        per_repeat = []
        for r in sorted({r for per in aimd.values() for r in per}):
            best = best_static(series, r, loads)
            mine = [aimd[x].get(r) for x in loads]
            if best is None or any(v is None for v in mine):
                continue
            per_repeat.append((r, best[0], sum(mine) / len(mine) - best[1]))
        ok = bool(per_repeat) and all(d >= 0.05 for _, _, d in per_repeat)
        detail = ", ".join(f"repeat {r + 1}: static {c}, {pct(d)}" for r, c, d in per_repeat)
        med = f"median {pct(statistics.median(d for _, _, d in per_repeat))}; " if per_repeat else ""
        out.append(f"aimd >= 5 points above the best single static cap (the cap with the best mean over the loads, "
                   f"chosen per repeat; aimd's mean − its mean): {'MET in every repeat' if ok else 'NOT MET'} "
                   f"({med}{detail or 'no repeat measured aimd and a static cap at every load'})")
    if name in ("bursty", "bursty_small") and "priority" in series:
        out += judge_priority(series)
    if name == "backlogged":
        for key in sorted(k for k in series if k.startswith("fair")):
            for x in sorted(series[key]):
                pairs = [(row["jain"], series.get("fcfs", {}).get(x, {}).get(r, {}).get("jain"))
                         for r, row in sorted(series[key][x].items())]
                pairs = [(j, f) for j, f in pairs if j is not None]
                if not pairs:
                    continue
                ok = all(j >= 0.9 for j, _ in pairs)
                fcfs = [f for _, f in pairs if f is not None]
                out.append(f"{key} at load {x:g}: Jain {', '.join(f'{j:.3f}' for j, _ in pairs)} (repeats) vs fcfs "
                           f"{', '.join(f'{f:.3f}' for f in fcfs) or '—'} — {'MET in every repeat' if ok else 'NOT MET'}"
                           f" (>= 0.9{'; fcfs is fair here too' if fcfs and min(fcfs) >= 0.9 else ''})")
    seed = series.get("seed", {})
    if seed:
        out.append("seed: " + ", ".join(
            f"load {x:g}: {with_spread([r['attainment'] for r in per.values()])}% "
            f"(state, repeat {max(per) + 1}: {json.dumps(per[max(per)]['state'])})" for x, per in sorted(seed.items())))
    return out


def judge_priority(series: Series) -> list[str]:
    """priority keeps the interactive tenant >= 95% in every repeat where that repeat's fcfs drops it below 80%."""
    tenants = sorted({t for per in series.get("priority", {}).values() for row in per.values() for t in row["tenants"]})
    urgent = "interactive" if "interactive" in tenants else (tenants[0] if tenants else None)
    if urgent is None:
        return []
    fcfs, prio = attainments(series, "fcfs", urgent), attainments(series, "priority", urgent)
    out = []
    for x in sorted(fcfs):
        where = [r for r, a in sorted(fcfs[x].items()) if a is not None and a < 0.80]
        if not where:
            continue
        got = [(r, prio.get(x, {}).get(r)) for r in where]
        ok = all(p is not None and p >= 0.95 for _, p in got)
        others = [t for t in tenants if t != urgent]
        cost = "; ".join(f"{t} {with_spread([attainments(series, 'priority', t).get(x, {}).get(r) for r in where])}%"
                         f" vs fcfs {with_spread([attainments(series, 'fcfs', t).get(x, {}).get(r) for r in where])}%"
                         for t in others)
        out.append(f"priority at load {x:g}, in the {len(where)} of {len(fcfs[x])} repeats where fcfs gives {urgent} "
                   f"< 80% ({', '.join(pct(fcfs[x][r]) for r in where)}): {urgent} "
                   f"{', '.join(pct(p) for _, p in got)} — {'MET in every one' if ok else 'NOT MET'} (>= 95%); "
                   f"cost: {cost}")
    return out or [f"priority: fcfs never drops {urgent} below 80% at these loads in any repeat: raise the loads"]


def draw(path: Path, name: str, env: dict[int, dict[float, float]], series: Series) -> None:
    """Each series' median over the repeats against load (bars: min–max of the repeats), the static caps dotted,
    the envelope (median of the repeats' envelopes) shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def medians(per_load: dict[float, dict[int, dict]]) -> tuple[list[float], list[tuple[float, float, float]]]:
        pts = sorted((x, spread([r["attainment"] for r in per.values()])) for x, per in per_load.items())
        return [x for x, s in pts if s], [s for _, s in pts if s]

    fig, ax = plt.subplots(figsize=(7, 4.5))
    loads = sorted({x for e in env.values() for x in e})
    ax.fill_between(loads, [100 * statistics.median(e[x] for e in env.values() if x in e) for x in loads],
                    color="0.85", label="static envelope (median of the repeats')")
    caps = [c for c in STATIC_CAPS if series.get(f"static {c}")]
    for c in caps:
        xs, ss = medians(series[f"static {c}"])
        ax.plot(xs, [100 * s[0] for s in ss], color="0.6", lw=0.8, ls=":", marker=".")
        if xs:
            ax.annotate(str(c), (xs[-1], 100 * ss[-1][0]), fontsize=7, color="0.4", xytext=(3, 0),
                        textcoords="offset points")
    for p in sorted(k for k in series if not k.startswith("static") and k != "fcfs"):
        xs, ss = medians(series[p])
        if xs:
            ax.errorbar(xs, [100 * s[0] for s in ss], yerr=[[100 * (s[0] - s[1]) for s in ss],
                                                           [100 * (s[2] - s[0]) for s in ss]],
                        marker="o", capsize=3, label=p)
    ax.axhline(90, color="k", lw=0.6, ls="--")
    ax.set(xlabel="offered load (× the file's rates)", ylabel="SLO attainment (%), median of the repeats",
           ylim=(0, 102), title=f"{name}: attainment against load (dotted: static caps {', '.join(map(str, caps))})")
    ax.legend(fontsize=8)
    fig.tight_layout()
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=110)
    tmp.replace(path)
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("results/policy-study"))
    parser.add_argument("--traffic", default=",".join(TRAFFIC), help=f"comma list of {', '.join(TRAFFIC)}")
    parser.add_argument("--loads", default=None, help="load factors for every traffic (default: each traffic's own)")
    parser.add_argument("--caps", default=None, help="static caps for every traffic, e.g. 16 (default: each's own)")
    parser.add_argument("--policies", default=None,
                        help="policies for every traffic, separated by ';' (default: each traffic's own)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="runs per traffic and load, every series in each, the order alternating (default 3)")
    parser.add_argument("--report-only", action="store_true", help="measure nothing: tables from OUT's files")
    parser.add_argument("pytest_args", nargs="*", help="more `batchperf run` arguments, after --")
    args = parser.parse_args()
    args.out = args.out.resolve()  # --out from where it was given; the rest (the suite, the traffic files, the node
    os.chdir(ROOT)  # ids pytest prints, relative paths in the pytest arguments) from the checkout's root
    names = [n.strip() for n in args.traffic.split(",") if n.strip()]
    unknown = [n for n in names if n not in TRAFFIC]
    if unknown:
        parser.error(f"unknown traffic {unknown}; known: {', '.join(TRAFFIC)}")
    if args.repeats < 1:
        parser.error(f"--repeats {args.repeats}: give 1 or more (3 or more to judge a spread)")
    args.out.mkdir(parents=True, exist_ok=True)
    report = []
    for name in names:
        traffic = TRAFFIC[name]
        paths = stored(args.out, name)  # refuses the old layout before measuring anything
        if not args.report_only:
            caps = tuple(int(c) for c in args.caps.split(",")) if args.caps else traffic.caps
            policies = tuple(args.policies.split(";")) if args.policies else traffic.policies
            loads = [x.strip() for x in (args.loads or traffic.loads).split(",") if x.strip()]
            measure(args.out, name, traffic, loads, caps, policies, args.repeats, args.pytest_args)
            paths = stored(args.out, name)
        if not paths:
            continue
        text, env, series = table(name, rows(paths))
        draw(args.out / f"{name}.png", name, env, series)
        report += [text, "", f"Targets ({traffic.what}):", *(f"- {line}" for line in judge(name, env, series)), ""]
    (args.out / "study.md").write_text("\n".join(report))
    print("\n".join(report))
    print(f"policy_study: tables in {args.out / 'study.md'}, plots {args.out}/<traffic>.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
