"""Issue 27's study: each batching policy's SLO attainment against offered load, beside the static envelope.

For each traffic (a tenants file: ``TRAFFIC`` below, each with its loads), the `continuous` backend runs, open
loop, at every load factor:

- the **static caps**: ``fcfs`` at batch sizes 1, 2, 4, 8, 16 (each measured, not assumed);
- the **policies**: ``seed``, ``aimd``, ``priority``, ``fair`` at batch size 16, their largest cap (the steady
  one-tenant traffic runs ``seed`` and ``aimd`` only; the backlogged pair ``fcfs`` at 16 and ``fair``).

The **static envelope** at a load is the best static cap's attainment there. The tool prints a table per traffic
(attainment overall and per tenant, Jain's index, the policy's own state), judges the issue's targets with their
numbers, and draws attainment against load (``OUT/<traffic>.png``). Each `batchperf run` leaves its results file
in OUT and is not run again (delete it to re-measure), so an interrupted study resumes where it stopped.

Loads are factors of the tenants file's own rates; ``--loads`` takes them as given. Measure on a quiet machine:

    OMP_NUM_THREADS=1 PYTHONPATH=src python tools/policy_study.py --out results/policy-study
    PYTHONPATH=src python tools/policy_study.py --out results/policy-study --report-only   # tables, plots, targets
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from batchperf.results.io import read_results

STATIC_CAPS = (1, 2, 4, 8, 16)
POLICIES = ("fcfs", "seed", "aimd", "priority", "fair")


@dataclass(frozen=True)
class Traffic:
    file: str  # the tenants file
    what: str  # the targets on it
    loads: str  # load factors swept (× the file's rates): about 0.5× to 2× fcfs's capacity at cap 16
    caps: tuple[int, ...] = STATIC_CAPS  # the static caps measured (fcfs at each batch size)
    policies: tuple[str, ...] = POLICIES[1:]  # the policies measured at the largest cap


TRAFFIC = {
    "poisson": Traffic("fixtures/traffic/poisson_one.toml",
                       "steady Poisson: aimd within 3 points of the static envelope at every load",
                       "1.5,2.5,3.5,5,7", policies=("seed", "aimd")),
    "bursty": Traffic("fixtures/traffic/bursty_tenants.toml",
                      "two bursty tenants: aimd >= 5 points above the best single static cap; priority keeps the "
                      "interactive tenant >= 95% where fcfs drops it below 80%",
                      "1,1.25,1.5,2"),
    "backlogged": Traffic("fixtures/traffic/heavy_light.toml",
                          "two backlogged tenants, one heavier: fair keeps Jain's index >= 0.9 where fcfs does not",
                          "4,8", caps=(16,), policies=("fair", "fair:tenant_cap=8")),
}


def run_cells(out: Path, name: str, what: str, argv: list[str]) -> Path:
    """One `batchperf run` into OUT/<name>-<what>.json, unless that file is there already."""
    path = out / f"{name}-{what}.json"
    if path.exists():
        print(f"policy_study: {path} kept (delete it to measure again)", flush=True)
        return path
    cmd = [sys.executable, "-m", "batchperf.cli", "run", "--tier", "cpu", f"--out={path}", *argv]
    print(f"policy_study: {' '.join(cmd)}", flush=True)
    started = time.monotonic()
    code = subprocess.call(cmd)
    print(f"policy_study: {name}-{what}: pytest exit {code} after {time.monotonic() - started:.0f} s", flush=True)
    if not path.exists():
        raise SystemExit(f"policy_study: {name}-{what} wrote no results (exit {code}); run the command above alone")
    return path


def measure(out: Path, name: str, traffic: Traffic, loads: str, caps: tuple[int, ...], policies: tuple[str, ...],
            extra: list[str]) -> list[Path]:
    common = ["--batchperf-backends=continuous", f"--batchperf-workloads=tenants:{traffic.file}",
              f"--batchperf-load={loads}", "--batchperf-concurrency=256", "--batchperf-prompt-lens=64", *extra]
    static = run_cells(out, name, "static", [*common, "--batchperf-policies=fcfs",
                                             f"--batchperf-batch-sizes={','.join(map(str, caps))}"])
    chosen = run_cells(out, name, "policies", [*common, f"--batchperf-policies={','.join(policies)}",
                                               f"--batchperf-batch-sizes={max(STATIC_CAPS)}"])
    return [static, chosen]


def rows(paths: list[Path]) -> list[dict[str, Any]]:
    """One row per measured cell: its policy, cap, load, attainment (overall and per tenant), fairness."""
    out = []
    for path in paths:
        for record in read_results(path, "study results").records:
            tenants = record.raw("tenants") or {}
            out.append({
                "policy": record.raw("policy.label") or record.raw("policy.name") or "fcfs",
                "cap": record.batch_size,
                "load": float(record.raw("workload.load") or record.raw("cell.load") or 1.0),
                "attainment": record.raw("slo.attainment"),
                "tenants": {t: v.get("attainment") for t, v in tenants.items()},
                "jain": record.raw("slo.jain_fairness"),
                "starved": record.raw("slo.starved_tenants"),
                "state": {k: v for k, v in (record.raw("policy") or {}).items()
                          if k not in ("name", "text", "label", "params", "engine")},
                "id": record.id,
            })
    return out


def pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f}"


def table(name: str, data: list[dict[str, Any]]) -> tuple[str, dict[float, float], dict[str, dict[float, dict]]]:
    """Markdown table; the static envelope by load; the rows by series ("fcfs bs4", "aimd") and load."""
    series: dict[str, dict[float, dict]] = defaultdict(dict)
    for row in data:
        key = f"static {row['cap']}" if row["policy"] == "fcfs" and row["cap"] != max(STATIC_CAPS) else row["policy"]
        if row["policy"] == "fcfs" and row["cap"] == max(STATIC_CAPS):
            series[f"static {row['cap']}"][row["load"]] = row
        series[key][row["load"]] = row
    loads = sorted({row["load"] for row in data})
    envelope = {x: max([(series[f"static {c}"][x]["attainment"] or 0.0) for c in STATIC_CAPS
                        if x in series.get(f"static {c}", {})] or [0.0]) for x in loads}
    tenants = sorted({t for row in data for t in row["tenants"]})
    lines = [f"### {name}", "", "| series | " + " | ".join(f"load {x:g}" for x in loads) + " |",
             "|---|" + "---:|" * len(loads)]
    names = [f"static {c}" for c in STATIC_CAPS if f"static {c}" in series] + sorted(k for k in series if not k.startswith("static")
                                                          and k != "fcfs")
    for key in names:
        cells = []
        for x in loads:
            row = series.get(key, {}).get(x)
            if row is None:
                cells.append("—")
                continue
            per = "/".join(pct(row["tenants"].get(t)) for t in tenants) if len(tenants) > 1 else ""
            jain = f" J{row['jain']:.2f}" if len(tenants) > 1 and row["jain"] is not None else ""
            starved = " STARVED" if row["starved"] else ""
            cells.append(f"{pct(row['attainment'])}" + (f" ({per})" if per else "") + jain + starved)
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
    lines.append("| **envelope** | " + " | ".join(pct(envelope[x]) for x in loads) + " |")
    if len(tenants) > 1:
        lines += ["", f"Cells: attainment % overall (per tenant: {' / '.join(tenants)}), J = Jain's index."]
    return "\n".join(lines), envelope, series


def judge(name: str, envelope: dict[float, float], series: dict[str, dict[float, dict]]) -> list[str]:
    """The issue's targets that apply to this traffic, each with its numbers and MET / NOT MET."""
    loads = sorted(envelope)
    out = []

    def att(key: str, x: float, tenant: str | None = None) -> float | None:
        row = series.get(key, {}).get(x)
        if row is None:
            return None
        return row["attainment"] if tenant is None else row["tenants"].get(tenant)

    aimd = {x: att("aimd", x) for x in loads}
    if name == "poisson":
        gaps = {x: (envelope[x] - aimd[x]) if aimd[x] is not None else None for x in loads}
        ok = all(g is not None and g <= 0.03 for g in gaps.values())
        out.append(f"aimd within 3 points of the envelope at every load: {'MET' if ok else 'NOT MET'} "
                   f"(envelope − aimd, points: " + ", ".join(f"{x:g}: {pct(g)}" for x, g in gaps.items()) + ")")
    if name == "bursty":
        means = {c: sum(att(f"static {c}", x) or 0.0 for x in loads) / len(loads) for c in STATIC_CAPS}
        best = max(means, key=means.__getitem__)
        diffs = {x: (aimd[x] - (att(f"static {best}", x) or 0.0)) if aimd[x] is not None else None for x in loads}
        mean_aimd = sum(v or 0.0 for v in aimd.values()) / len(loads)
        ok = mean_aimd - means[best] >= 0.05
        out.append(f"aimd >= 5 points above the best single static cap (static {best}, mean {pct(means[best])}%): "
                   f"{'MET' if ok else 'NOT MET'} (aimd mean {pct(mean_aimd)}%; aimd − static {best} by load, points: "
                   + ", ".join(f"{x:g}: {pct(d)}" for x, d in diffs.items()) + ")")
        tenants = sorted({t for row in series.get("priority", {}).values() for t in row["tenants"]})
        urgent = "interactive" if "interactive" in tenants else (tenants[0] if tenants else None)
        if urgent is not None:
            where = [x for x in loads if (a := att("fcfs", x, urgent)) is not None and a < 0.80]
            if not where:
                out.append(f"priority: fcfs never drops {urgent} below 80% at these loads: raise the loads")
            for x in where:
                p = att("priority", x, urgent)
                others = {t: (att("priority", x, t), att("fcfs", x, t)) for t in tenants if t != urgent}
                cost = ", ".join(f"{t} {pct(b)}% vs fcfs {pct(a)}%" for t, (b, a) in others.items())
                out.append(f"priority at load {x:g} (fcfs gives {urgent} {pct(att('fcfs', x, urgent))}%): {urgent} "
                           f"{pct(p)}% — {'MET' if p is not None and p >= 0.95 else 'NOT MET'} (>= 95%); cost: {cost}")
    if name == "backlogged":
        for key in sorted(k for k in series if k.startswith("fair")):
            for x in loads:
                f, g = series.get("fcfs", {}).get(x), series[key].get(x)
                if f is None or g is None or f["jain"] is None or g["jain"] is None:
                    continue
                verdict = "MET" if g["jain"] >= 0.9 else "NOT MET"
                out.append(f"{key} at load {x:g}: Jain {g['jain']:.3f} vs fcfs {f['jain']:.3f} — {verdict} (>= 0.9"
                           f"{'' if f['jain'] < 0.9 else '; fcfs is fair here too'})")
    seed = series.get("seed", {})
    if seed:
        out.append("seed: " + ", ".join(f"load {x:g}: {pct(r['attainment'])}% (state {json.dumps(r['state'])})"
                                        for x, r in sorted(seed.items())))
    return out


def draw(path: Path, name: str, envelope: dict[float, float], series: dict[str, dict[float, dict]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    loads = sorted(envelope)
    ax.fill_between(loads, [100 * envelope[x] for x in loads], color="0.85", label="static envelope")
    for c in STATIC_CAPS:
        pts = sorted(series.get(f"static {c}", {}).items())
        ax.plot([x for x, _ in pts], [100 * (r["attainment"] or 0) for _, r in pts], color="0.6", lw=0.8,
                ls=":", marker=".")
    for p in sorted(k for k in series if not k.startswith("static") and k != "fcfs"):
        pts = sorted(series[p].items())
        if pts:
            ax.plot([x for x, _ in pts], [100 * (r["attainment"] or 0) for _, r in pts], marker="o", label=p)
    ax.axhline(90, color="k", lw=0.6, ls="--")
    ax.set(xlabel="offered load (× the file's rates)", ylabel="SLO attainment (%)", ylim=(0, 102),
           title=f"{name}: attainment against load (dotted: static caps {STATIC_CAPS})")
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
    parser.add_argument("--report-only", action="store_true", help="measure nothing: tables from OUT's files")
    parser.add_argument("pytest_args", nargs="*", help="more `batchperf run` arguments, after --")
    args = parser.parse_args()
    names = [n.strip() for n in args.traffic.split(",") if n.strip()]
    unknown = [n for n in names if n not in TRAFFIC]
    if unknown:
        parser.error(f"unknown traffic {unknown}; known: {', '.join(TRAFFIC)}")
    args.out.mkdir(parents=True, exist_ok=True)
    report = []
    for name in names:
        traffic = TRAFFIC[name]
        what = traffic.what
        if args.report_only:
            paths = [p for p in (args.out / f"{name}-static.json", args.out / f"{name}-policies.json") if p.exists()]
        else:
            caps = tuple(int(c) for c in args.caps.split(",")) if args.caps else traffic.caps
            policies = tuple(args.policies.split(";")) if args.policies else traffic.policies
            paths = measure(args.out, name, traffic, args.loads or traffic.loads, caps, policies, args.pytest_args)
        if not paths:
            continue
        text, envelope, series = table(name, rows(paths))
        draw(args.out / f"{name}.png", name, envelope, series)
        report += [text, "", f"Targets ({what}):", *(f"- {line}" for line in judge(name, envelope, series)), ""]
    (args.out / "study.md").write_text("\n".join(report))
    print("\n".join(report))
    print(f"policy_study: tables in {args.out / 'study.md'}, plots {args.out}/<traffic>.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
