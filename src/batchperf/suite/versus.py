"""Backends side by side on the same cells of the matrix, in one process: output tokens/s and ratios.

The cells are a tier's (:mod:`batchperf.suite.matrix`, narrowed by the same
``--batchperf-*`` options as the plugin) that every chosen backend has in that
tier, its per-backend limits applied; the first backend is the reference. Each
cell runs every backend ``repeats`` times, interleaved (A B, B A, A B, …) so
drift and a noisy neighbour hit all alike. On a shared machine a slow run
means someone else had the cores, never that the code got faster, so by
default each backend's *best* run is reported (as ``timeit`` does) with the
ratio of the bests; ``stat="median"`` reports medians and the median of the
paired ratios. The CLI is :mod:`batchperf.cli.versus`.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from batchperf.backends import BackendUnavailable
from batchperf.measure.metrics import compute_metrics, token_count_errors
from batchperf.suite.cell import build_workload, one_round
from batchperf.suite.matrix import CellParams, Tier
from batchperf.suite.parallel import tp_skip_reason
from batchperf.suite.pool import BackendPool, ModelPool

STATS = ("best", "median")
# What the continuous scheduler must achieve over hf-static (docs/continuous.md): 1.25× where requests queue
# behind a full batch (the study's weakness was 0.5× there), and no loss elsewhere.
TARGETED = ("hf-static", "continuous")


def target(reference: str, backend: str, batch_size: int, concurrency: int) -> float | None:
    """The ratio ``backend`` must reach over ``reference`` in this cell; None for pairs without a target."""
    if (reference, backend) != TARGETED:
        return None
    return 1.25 if concurrency > batch_size else 0.97


def shared_cells(tier: Tier, backends: Sequence[str]) -> list[CellParams]:
    """The tier's cells that every backend has, as the reference (first) backend's, in its order."""
    def without_backend(params: CellParams) -> CellParams:
        return replace(params, backend="")

    others = [{without_backend(c) for c in replace(tier, backends=(b,)).cells()} for b in backends[1:]]
    return [c for c in replace(tier, backends=(backends[0],)).cells()
            if all(without_backend(c) in cells for cells in others)]


@dataclass(slots=True)
class VersusResult:
    """One cell as every backend ran it."""

    params: CellParams  # the reference backend's cell
    backends: list[str]  # the reference first
    throughput: dict[str, list[float]] = field(default_factory=dict)  # backend -> output tok/s of each repeat
    ratios: dict[str, list[float]] = field(default_factory=dict)  # backend -> over the reference, per repeat
    errors: list[str] = field(default_factory=list)
    # backend -> P99 TTFT (ms) of each repeat: a throughput gain bought with a worse tail shows in the JSON
    p99_ttft_ms: dict[str, list[float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in self.backends:
            self.throughput.setdefault(name, [])
            self.p99_ttft_ms.setdefault(name, [])
        for name in self.backends[1:]:
            self.ratios.setdefault(name, [])

    def value(self, backend: str, stat: str) -> float:
        values = self.throughput[backend]
        if not values:
            return math.nan
        return max(values) if stat == "best" else statistics.median(values)

    def ratio(self, backend: str, stat: str) -> float:
        if stat == "best":
            return self.value(backend, stat) / self.value(self.backends[0], stat)
        return statistics.median(self.ratios[backend]) if self.ratios[backend] else math.nan

    def target(self, backend: str) -> float | None:
        try:
            cell = self.params.resolve()
        except ValueError:
            return None
        return target(self.backends[0], backend, cell.batch_size, cell.concurrency)

    def to_dict(self) -> dict[str, Any]:
        # the rounds are the tier's, not this run's: each backend ran ``repeats`` times
        cell = {k: v for k, v in asdict(self.params).items() if k not in ("backend", "rounds", "warmup_rounds")}
        return {"cell": cell, "reference": self.backends[0], "throughput": self.throughput, "ratios": self.ratios,
                "p99_ttft_ms": self.p99_ttft_ms, "targets": {b: self.target(b) for b in self.backends[1:]}, "errors": self.errors}


def available_backends(names: Sequence[str], models: ModelPool, backends: BackendPool,
                       cells: Sequence[CellParams]) -> dict[str, str]:
    """Backend -> why it cannot run here (built once per model; a model that does not load is its cells' error)."""
    missing: dict[str, str] = {}
    for model_name, device in dict.fromkeys((c.model, c.device) for c in cells):
        try:
            model = models.get(model_name, device)
        except Exception:  # noqa: BLE001 - reported by each of its cells
            continue
        for name in names:
            if name in missing:
                continue
            try:
                backends.get(name, model)
            except BackendUnavailable as exc:
                missing[name] = str(exc)
    return missing


def run_versus_cell(params: CellParams, names: Sequence[str], models: ModelPool, backends: BackendPool,
                    repeats: int) -> VersusResult:
    """Every backend on one cell, ``repeats`` times, in alternating order; errors are collected, never raised."""
    result = VersusResult(params, list(names))
    try:
        cell = params.resolve()
        if reason := tp_skip_reason(cell):
            raise BackendUnavailable(reason)
        model = models.get(params.model, params.device)
        workload = build_workload(cell, model)
    except Exception as exc:  # noqa: BLE001 - a bad cell or model is this cell's error; the table goes on
        result.errors.append(f"{type(exc).__name__}: {exc}")
        return result
    for rep in range(repeats):
        got: dict[str, float] = {}
        for name in (names if rep % 2 == 0 else names[::-1]):
            try:
                # a round as a cell's test measures it (telemetry sampled alike), so the numbers compare
                trace = one_round(backends.get(name, model, tp=cell.tp), cell, workload)
            except Exception as exc:  # noqa: BLE001 - one broken run must not take the table down
                result.errors.append(f"{name}: {type(exc).__name__}: {exc}")
                continue
            result.errors.extend(f"{name}: {line}" for line in token_count_errors(trace))
            metrics = compute_metrics(trace)
            got[name] = metrics["output_throughput"]
            result.throughput[name].append(got[name])
            result.p99_ttft_ms[name].append(metrics["p99_ttft_ms"])
        for name in names[1:]:
            if name in got and names[0] in got:
                result.ratios[name].append(got[name] / got[names[0]])
    return result


def run_versus(cells: Sequence[CellParams], names: Sequence[str], models: ModelPool, backends: BackendPool,
               repeats: int, done: Callable[[VersusResult], None] = lambda _: None) -> list[VersusResult]:
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    if len(names) < 2:
        raise ValueError(f"versus needs two or more backends, got {list(names)}")
    results = []
    for params in cells:
        results.append(run_versus_cell(params, names, models, backends, repeats))
        done(results[-1])
    return results


def _number(value: float | None, digits: int) -> str:
    return f"{value:.{digits}f}" if value is not None and math.isfinite(value) else "-"


def _met(goal: float | None, ratio: float, errors: list[str]) -> str:
    if errors:
        return "ERROR"
    if goal is None or not math.isfinite(ratio):
        return "-"
    return "yes" if ratio >= goal else "NO"


def format_table(results: Sequence[VersusResult], names: Sequence[str], stat: str = "best") -> str:
    """A markdown table: per cell each backend's tok/s, the others' ratio to the reference, and any target."""
    ref, others = names[0], list(names[1:])
    columns = [("model", "---"), ("prompt", "---"), ("batch", "--:"), ("conc", "--:"), (f"{ref} tok/s", "--:")]
    for name in others:
        columns += [(f"{name} tok/s", "--:"), (f"{name}/{ref}", "--:")]
        if (ref, name) == TARGETED:
            columns += [("target", "--:"), ("met", ":-:")]
    lines = ["| " + " | ".join(title for title, _ in columns) + " |", "|" + "|".join(a for _, a in columns) + "|"]
    for r in results:
        p = r.params
        prompt = f"mix {p.prompt_len}" if "," in p.prompt_len else p.prompt_len
        row = [p.model, prompt, p.batch_size, p.concurrency, _number(r.value(ref, stat), 1)]
        for name in others:
            ratio = r.ratio(name, stat)
            row += [_number(r.value(name, stat), 1), _number(ratio, 2)]
            if (ref, name) == TARGETED:
                goal = r.target(name)
                row += [_number(goal, 2), _met(goal, ratio, r.errors)]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)
