"""What ``batchperf ab`` prints: a terminal table per cell, the same as Markdown for a CI job summary.

The tables are the one verdict table (:mod:`batchperf.regress.verdict`) with ab's interval columns, so the
terminal, the summary, the gate and ``compare`` never disagree.
"""

from __future__ import annotations

import statistics
from typing import Any

from batchperf.ab.result import AbResult
from batchperf.regress import verdict as table
from batchperf.regress.machine import cpu_lost, gaps_beyond, speed_gap

EXIT_MEANING = {0: "no regression", 1: "regression", 2: "inconclusive at the budget",
                4: "a cell failed to run or was not judged, or an environment failed", 130: "interrupted"}


def headline(result: AbResult) -> list[str]:
    s = result.settings
    loads = result.loads
    lines = [f"A = {s.a.describe()}", f"B = {s.b.describe()}",
             f"{len(result.pairs)} pair(s) of fresh processes (A B, B A, …) in {result.elapsed_s / 60:.1f} min; "
             f"{rounds_text(result)}; status: {result.status}" + (f" ({result.reason})" if result.reason else "")]
    if result.warmup is not None:
        lines.append(result.warmup.describe())
    if s.keep_servers:
        lines.append(kept_text(result))
    if loads:
        lines.append(f"machine load (1-min average, at each pair): min {min(loads):.2f}, median "
                     f"{statistics.median(loads):.2f}, max {max(loads):.2f}")
    if machine := machine_text(result):
        lines.append(machine)
    if waits := wait_text(result):
        lines.append(waits)
    lines.append(f"intervals: {result.sequential_test.describe()} ({result.level_method})")
    if result.versions_differ:
        lines.append("versions that differ: " + ", ".join(f"{k} {a} → {b}" for k, (a, b) in result.versions_differ.items()))
    else:
        lines.append("versions that differ: none (same upgrade axes in A and B)")
    if result.vars_differ:
        lines.append("environment variables that differ: "
                     + ", ".join(f"{k} {a} → {b}" for k, (a, b) in result.vars_differ.items()))
    for label, ids in result.only_in.items():
        lines.append(f"only in {label} (not compared): {', '.join(ids)}")
    return lines


def kept_text(result: AbResult) -> str:
    """--keep-servers: the servers each side kept across its pairs, how often fresh ones were started, and when
    (docs/ab.md)."""
    every = result.settings.restart_servers_every
    started = "; ".join(f"{label}: " + (", ".join(f"{r.get('name')} started {r.get('starts')}x" for r in records)
                                         or "none started")
                        for label, records in result.kept_servers.items())
    when = ", ".join(start.describe() for start in result.server_starts)
    return (f"servers kept across pairs (--keep-servers), fresh ones every {every} pair(s) (--restart-servers-every), "
            "so that a verdict samples several server levels" + (f"; fresh servers from {when}" if when else "")
            + (f"; {started}" if started else ""))


def machine_text(result: AbResult) -> str:
    """The machine's own speed beside each pair (each side's session probes): the pairs whose two sides saw speeds
    apart by more than the margin, whose ratios carry the machine's move as well as the code's."""
    probed = [(p.index, speed_gap(p.machine.get("A"), p.machine.get("B"))) for p in result.pairs if len(p.machine) == 2]
    if not probed:
        return ""
    margin = result.settings.margin
    apart = [f"pair {index}: {words}" for index, gaps in probed if (words := gaps_beyond(gaps, margin))]
    if not apart:
        return f"machine speed (probed beside each side): B's within ±{margin:.0%} of A's in all {len(probed)} pair(s)"
    return (f"machine speed (probed beside each side), B's against A's beyond ±{margin:.0%} in {len(apart)} of "
            f"{len(probed)} pair(s), whose ratios carry the machine's move too: " + "; ".join(apart))


def wait_text(result: AbResult) -> str:
    """Each cell's CPU wait share (the share of its threads' ready time spent waiting for a CPU:
    telemetry.cpu_wait_share), the median over the pairs on each side: the cells whose B got less (or more) CPU than
    A by more than the margin, which the probes beside each side can miss (a busy neighbour leaves a half-second
    probe a core of its own: docs/baselines.md, "The machine's own speed")."""
    shares: dict[str, dict[str, list[float]]] = {}
    for pair in result.pairs:
        if len(pair.waits) == 2:
            for label, cells in pair.waits.items():
                for cell, share in cells.items():
                    shares.setdefault(cell, {}).setdefault(label, []).append(share)
    both = {cell: (statistics.median(s["A"]), statistics.median(s["B"])) for cell, s in shares.items() if len(s) == 2}
    if not both:
        return ""
    margin = result.settings.margin
    apart = [f"{cell}: A {a:.0%}, B {b:.0%} ({-lost:+.0%} CPU)" for cell, (a, b) in sorted(both.items())
             if (lost := cpu_lost(b, a)) is not None and abs(lost) > margin]
    head = "CPU wait (the share of a cell's ready time its threads waited for a CPU, median over the pairs)"
    if not apart:
        return f"{head}: B's within ±{margin:.0%} of A's CPU in all {len(both)} cell(s)"
    return (f"{head}, B's CPU against A's beyond ±{margin:.0%} in {len(apart)} of {len(both)} cell(s), whose ratios "
            "carry the machine's load too: " + "; ".join(apart))


def rounds_text(result: AbResult) -> str:
    choice = result.rounds
    if choice is None:
        return "rounds per process not yet known"
    if choice.given is not None:
        return f"{choice.chosen} round(s) per process (given)"
    return f"{choice.chosen} round(s) per process, chosen from {choice.why}"


def summary(result: AbResult) -> str:
    code = result.exit_code
    return f"{table.count_line(result.cells.values())} → exit {code} ({EXIT_MEANING.get(code, '')})"


def render_rich(result: AbResult, console: Any) -> None:
    for line in headline(result):
        console.print(line, highlight=False)
    table.render_rich([c.cell_verdict() for c in result.cells.values()], console, ab=True)
    console.print(f"batchperf ab: {summary(result)}", highlight=False)


def render_ab_markdown(result: AbResult) -> str:
    lines = ["## batchperf ab", "", f"**{summary(result)}**", ""]
    lines += [f"- {line}" for line in headline(result)] + [""]
    lines += table.render_verdicts_markdown([c.cell_verdict() for c in result.cells.values()], ab=True)
    return "\n".join(lines)
