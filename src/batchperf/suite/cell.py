"""Measure one cell under pytest-benchmark and build the record it stores in ``extra_info``."""

from __future__ import annotations

import hashlib
import json
import statistics
from typing import Any

from batchperf.backends import Backend
from batchperf.measure.kv import kv_bytes_per_request, kv_bytes_per_token
from batchperf.suite.matrix import Cell
from batchperf.measure.metrics import compute_metrics, token_count_errors
from batchperf.suite.models import LoadedModel
from batchperf.backends.runner import run_cell
from batchperf.measure.telemetry import Sampler
from batchperf.measure.trace import RunTrace
from batchperf.measure.workload import Workload

SCHEMA_VERSION = 1


# Where a config was read from and which library wrote it say nothing about the model.
_NOT_IDENTITY = ("_name_or_path", "transformers_version", "_commit_hash")


def config_hash(config: Any) -> str:
    """A short stable hash of a model config (its JSON, keys sorted, without its path or writer's version)."""
    data = config.to_dict() if hasattr(config, "to_dict") else dict(config)
    data = {k: v for k, v in data.items() if k not in _NOT_IDENTITY}
    blob = json.dumps(data, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def build_workload(cell: Cell, model: LoadedModel) -> Workload:
    return cell.workload.build(model.vocab_size, model.max_model_len)


def one_round(backend: Backend, cell: Cell, workload: Workload) -> RunTrace:
    return run_cell(backend, workload, cell.batch_size, cell.concurrency, Sampler(cell.params.device))


def run_rounds(benchmark: Any, backend: Backend, cell: Cell, workload: Workload) -> list[RunTrace]:
    """Time ``rounds`` runs of the cell with ``benchmark.pedantic``; warm-up rounds are run and dropped."""
    traces: list[RunTrace] = []

    def timed_round() -> None:
        traces.append(one_round(backend, cell, workload))

    rounds, warmup = cell.params.rounds, cell.params.warmup_rounds
    benchmark.pedantic(timed_round, rounds=rounds, warmup_rounds=warmup, iterations=1)
    # pedantic runs the warm-up rounds first; with --benchmark-disable it runs the target once.
    return traces[-rounds:] if len(traces) > rounds else traces


def remeasure(backend: Backend, cell: Cell, workload: Workload, model: LoadedModel) -> dict[str, Any]:
    """The cell's record from fresh rounds, outside pytest-benchmark: the gate's confirmation run."""
    return cell_record(cell, model, [one_round(backend, cell, workload) for _ in range(cell.params.rounds)])


def kv_figures(traces: list[RunTrace], model: LoadedModel) -> dict[str, Any]:
    last = traces[-1]
    held = [r for r in last.requests if r.kv_bytes is not None and r.kv_tokens]
    analytic_per_token = kv_bytes_per_token(model.config, model.dtype)
    figures: dict[str, Any] = {
        "bytes_per_token_analytic": analytic_per_token,
        "kv_bytes_per_request_analytic_mean": statistics.fmean(
            kv_bytes_per_request(model.config, model.dtype, r.prompt_len, r.output_len) for r in last.requests
        ),
        **{k: v for k, v in last.kv.items()},
    }
    if held:
        figures["bytes_per_token_measured"] = sum(r.kv_bytes for r in held) / sum(r.kv_tokens for r in held)
        figures["kv_bytes_per_request_mean"] = statistics.fmean(r.kv_bytes for r in held)
        figures["kv_tokens_per_request_mean"] = statistics.fmean(r.kv_tokens for r in held)
    return figures


def summarise(rounds: list[dict[str, float]]) -> dict[str, float]:
    """Median over rounds of every metric (sample counts come from the last round)."""
    keys = rounds[-1].keys()
    return {k: (rounds[-1][k] if k.startswith("n_") else statistics.median(r[k] for r in rounds)) for k in keys}


def cell_record(cell: Cell, model: LoadedModel, traces: list[RunTrace]) -> dict[str, Any]:
    """Everything a cell stores: parameters, metrics (median and per round), KV, telemetry, raw traces."""
    rounds = [compute_metrics(t) for t in traces]
    return {
        "batchperf_schema": SCHEMA_VERSION,
        "cell": {**cell.describe(), "dtype": model.spec.dtype},
        "model": {"source": str(model.spec.source), "path": str(model.path), "config_hash": config_hash(model.config)},
        "metrics": summarise(rounds),
        "rounds": rounds,
        "kv": kv_figures(traces, model),
        "telemetry": traces[-1].telemetry,  # of the last measured round; every round's is in its trace
        "token_count_errors": token_count_errors(traces[-1]),
        "traces": [t.to_dict() for t in traces],
    }
