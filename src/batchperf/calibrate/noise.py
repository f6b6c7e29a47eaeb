"""Where the detector study's noise is, from every round of every measured process (the pairs' results files):
within a process or between processes (:func:`noise`), and wall-clock throughput against CPU time per output token
on the same pairs (:func:`wall_and_cpu`)."""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

from batchperf.ab.stats.signed_rank import process_noise
from batchperf.calibrate.scores import Key, measured, row_head
from batchperf.results.io import read_results
from batchperf.results.record import CellRecord
from batchperf.telemetry.sampler import summarise_telemetry

CPU_PER_TOKEN = "cpu_seconds_per_output_token"


def results_files(doc: dict[str, Any], pair: dict[str, Any]) -> dict[str, Path]:
    """A pair's results file per side, in its verdict's folder (wherever the study was moved)."""
    return {label: Path(doc["folder"]) / Path(pair[label]["results"]).name for label in pair["order"]}


def process_pairs(work: Path) -> dict[Key, list[dict[str, CellRecord]]]:
    """(kind, slowdown) -> every measured pair of its finished verdicts, as {label: that process's record}."""
    out: dict[Key, list[dict[str, CellRecord]]] = {}
    for key, docs in sorted(measured(work).items()):
        for doc in docs:
            (cell,) = doc["cells"]
            for pair in doc["pairs"]:
                paths = results_files(doc, pair)
                if not all(path.exists() for path in paths.values()):  # kept without them: see without_results()
                    continue
                sides = {label: next(r for r in read_results(path).records if r.id == cell["id"])
                         for label, path in paths.items()}
                out.setdefault(key, []).append(sides)
    return out


def without_results(work: Path) -> int:
    """How many finished verdicts lack their pairs' results files (a study kept in the repository with its
    ``ab.json`` files alone): the verdict table and the estimate come from ``ab.json``; the noise and the wall/CPU
    tables, which need every round, leave those verdicts out."""
    return sum(1 for docs in measured(work).values() for doc in docs
               if not all(path.exists() for pair in doc["pairs"] for path in results_files(doc, pair).values()))


def noise(work: Path, metric: str) -> str:
    """Where the noise is: the spread of rounds within a process, and of processes beyond what their rounds explain
    (:class:`batchperf.ab.stats.signed_rank.ProcessNoise`, from every measured process's per-round values, its
    results file). More rounds shrink only the first. The predicted pair sd summarises a process by its mean round
    (ab takes the median round, the record's metric, which is a little noisier).
    """
    lines = [("| cell | B slowed by | processes x rounds | within a process (a round) | between processes "
              "| predicted pair sd at 3 / 10 / 30 rounds |"), "|---|---:|---:|---:|---:|---:|"]
    for (kind, slowdown), records in process_pairs(work).items():
        pairs = [{label: [r[metric] for r in record.rounds] for label, record in sides.items()} for sides in records]
        if (found := process_noise(pairs)) is None:
            continue
        pair_sd = "/".join(f"{found.predicted_pair_sd(r):.3f}" for r in (3, 10, 30))
        lines.append(f"{row_head(kind, slowdown)} {found.processes} x {found.rounds:g} | {found.within:.3f} "
                     f"| {found.process:.3f} | {pair_sd} |")
    return "\n".join(lines)


def wall_and_cpu(work: Path) -> str:
    """Wall-clock throughput against CPU seconds per output token, on the same pairs: is CPU time the steadier
    yardstick (issue 25: make it a deciding metric only if it is)?

    Each process is summarised as a cell is (``batchperf.suite.cell``): the median of its rounds' throughput and
    of its rounds' CPU time per token (``summarise_telemetry`` of the rounds' telemetry, in the traces), and for
    comparison the one round's CPU figure a record kept before that (its last round). Per row: the mean and sd
    over pairs of the change each shows, as "B worse than A" on the log scale (throughput ln(A/B), CPU per
    token ln(B/A)). An A/A row's sd is the steadiness; a slowed row's mean says what each sees of the injected
    slowdown: a wait (``batchperf.backends.inject.wait``) that sleeps all but its last 2 ms and spins those, so
    CPU time sees only the spun part (all of a short wait; before 2026-12-04 the wait was a sleep, which CPU time
    could not see: the "wait" label of ``batchperf.regress.cell_notes``).
    """
    lines = [("| cell | B slowed by | pairs | throughput: B worse by, mean (sd) | CPU s per token, median of rounds "
              "| CPU s per token, last round only |"), "|---|---:|---:|---:|---:|---:|"]
    for (kind, slowdown), records in process_pairs(work).items():
        changes = []
        for sides in records:
            if len(sides) != 2:
                continue
            a, b = (sides[label] for label in ("A", "B"))
            cpu = [summarise_telemetry([t.get("telemetry") or {} for t in r.traces]).get(CPU_PER_TOKEN) for r in (a, b)]
            last = [r.traces[-1].get("telemetry", {}).get(CPU_PER_TOKEN) if r.traces else None for r in (a, b)]
            if None in cpu or None in last:
                continue
            changes.append((math.log(a.metrics["output_throughput"] / b.metrics["output_throughput"]),
                            math.log(cpu[1] / cpu[0]), math.log(last[1] / last[0])))
        if len(changes) < 3:
            continue
        cols = " | ".join(f"{statistics.mean(c):+.3f} ({statistics.stdev(c):.3f})" for c in zip(*changes))
        lines.append(f"{row_head(kind, slowdown)} {len(changes)} | {cols} |")
    return "\n".join(lines)
