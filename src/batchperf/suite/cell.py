"""Measure one cell under pytest-benchmark and build its :class:`~batchperf.results.record.CellRecord`.

:func:`measure_cell` is the whole body of a cell's test; :func:`one_round` is the one way a cell is run, shared
with ``batchperf versus`` (:mod:`batchperf.suite.versus`).
"""

from __future__ import annotations

import statistics
from collections import Counter
from typing import Any

import pytest

from batchperf.backends import Backend, CellUnsupported
from batchperf.backends.cell_run import run_cell
from batchperf.backends.continuous import engine_priority_note
from batchperf.backends.vllm_policy import priority_note
from batchperf.launch import round_gate
from batchperf.measure.client_lag import summarise as summarise_client
from batchperf.measure.counters import summarise as summarise_counters
from batchperf.measure.devices import device_name
from batchperf.measure.efficiency import efficiency
from batchperf.measure.kv import kv_figures
from batchperf.measure.metrics import compute_metrics, summarise, token_count_errors
from batchperf.measure.slo import NO_TENANT, slo_summary, summarise_tenants
from batchperf.measure.trace import RunTrace
from batchperf.regress.gate import starvation_note
from batchperf.results.record import CellRecord
from batchperf.suite.gate_plugin import gate_cell, gate_outcome
from batchperf.suite.matrix import Cell
from batchperf.suite.models import LoadedModel, config_hash
from batchperf.suite.plugin import keep_record
from batchperf.telemetry.sampler import Sampler, summarise_telemetry
from batchperf.workload.spec import Workload
from batchperf.workload.traffic import describe_workload, shared_prefix_counters


def measure_cell(benchmark: Any, request: pytest.FixtureRequest, cell: Cell, model: LoadedModel, backend: Backend,
                 workload: Workload) -> CellRecord:
    """Time the cell, build its record, keep it for the summary, check its token counts, gate it (re-measured
    before it fails) and store the final record, gate verdict included, as the benchmark's ``extra_info``."""
    __tracebackhide__ = True  # a failure points at the cell's test, not at this helper
    try:
        traces = run_rounds(benchmark, backend, cell, workload)
    except CellUnsupported as exc:  # raised before anything is measured (a given server runs another cell)
        pytest.skip(f"cell {cell.id}: backend {cell.params.backend!r} cannot run it: {exc}")
    record = cell_record(cell, model, traces, workload, backend)
    keep_record(request.config, record)
    errors = record.token_count_errors
    verdict = None
    try:
        if not errors:  # a cell that miscounts tokens is failed as such, never compared with its baseline
            verdict = gate_cell(request, record, lambda: remeasure(backend, cell, workload, model))
    finally:  # the results JSON keeps what was measured even when the re-measurement breaks or is interrupted
        benchmark.extra_info.update(record.to_dict())
    # pytest rewrites the asserts of its plugins' packages (batchperf's, by its pytest11 entry point), so this
    # failure reads as it did in the test body: the message, then the list
    assert not errors, f"{len(errors)} request(s) did not produce their target token count:\n" + "\n".join(errors)
    assert not record.starved(), starvation_note(record)
    gate_outcome(request, verdict)
    return record


def build_workload(cell: Cell, model: LoadedModel) -> Workload:
    kind = cell.traffic if cell.traffic is not None else cell.workload
    return kind.build(model.vocab_size, model.max_model_len)


def workload_section(workload: Workload, backend: Backend, spec: str, ran: dict[str, Any] | None = None
                     ) -> dict[str, Any]:
    """The record's ``workload`` section: the traffic, and how this backend treated its priorities and prefixes
    (under vLLM, by the scheduling policy it ``ran``: ``RunTrace.policy``)."""
    honours, note = getattr(backend, "priority_support", (False, f"{backend.name} does not say; taken as ignored"))
    if ran and "scheduling_policy" in ran:
        honours, note = priority_note(backend.name, ran["scheduling_policy"] == "priority")
    elif ran and ran.get("engine") == "batchperf":
        honours, note = engine_priority_note(str(ran.get("policy", "fcfs")))
    prefix_caching = getattr(backend, "prefix_caching_for", None)
    return describe_workload(workload, spec, honours, note, None if prefix_caching is None else prefix_caching(workload))


def one_round(backend: Backend, cell: Cell, workload: Workload) -> RunTrace:
    return run_cell(backend, workload, cell.batch_size, cell.concurrency, Sampler(cell.params.device), cell.policy)


def run_rounds(benchmark: Any, backend: Backend, cell: Cell, workload: Workload) -> list[RunTrace]:
    """Time ``rounds`` runs of the cell with ``benchmark.pedantic``; warm-up rounds are run and dropped."""
    traces: list[RunTrace] = []

    def timed_round() -> None:
        traces.append(one_round(backend, cell, workload))

    rounds, warmup = cell.params.rounds, cell.params.warmup_rounds
    # the round gate (ab's resident design) waits in pedantic's untimed set-up, before each round, warm-up included
    benchmark.pedantic(timed_round, setup=lambda: round_gate.wait(f"round {cell.id}"), rounds=rounds,
                       warmup_rounds=warmup, iterations=1)
    round_gate.wait(f"end {cell.id}")
    # pedantic runs the warm-up rounds first; with --benchmark-disable it runs the target once.
    return traces[-rounds:] if len(traces) > rounds else traces


def remeasure(backend: Backend, cell: Cell, workload: Workload, model: LoadedModel) -> CellRecord:
    """The cell's record from fresh rounds, outside pytest-benchmark: the gate's confirmation run."""
    return cell_record(cell, model, [one_round(backend, cell, workload) for _ in range(cell.params.rounds)],
                       workload, backend)


def slo_sections(traces: list[RunTrace], workload: Workload | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The cell's ``slo`` and ``tenants`` sections: each round's (measure.slo), median over rounds. Requests are
    offered per tenant as the workload built them, so one that never came back is a miss."""
    slos = workload.slos if workload is not None else {}
    offered = None
    if workload is not None:
        offered = dict(Counter(r.tenant or NO_TENANT for r in workload.requests))
    per_round = [slo_summary(t, slos, offered) for t in traces]
    slo, tenants = summarise([s for s, _ in per_round]), summarise_tenants([t for _, t in per_round])
    # starvation in any round is starvation: the worst round, not the median
    if per_round:
        slo["starved_tenants"] = max(s["starved_tenants"] for s, _ in per_round)
    for name, block in tenants.items():
        for key in ("starved", "longest_unserved_s"):
            block[key] = max(t[name][key] for _, t in per_round if name in t)
    return slo, tenants


def policy_section(cell: Cell, backend: Backend | None, traces: list[RunTrace]) -> dict[str, Any]:
    """The record's ``policy`` section: the policy asked for (name, parameters, label) and what the backend ran and
    did (``RunTrace.policy``: the engine's ``Policy.state()``, vLLM's scheduling policy), numbers as the median over
    rounds."""
    spec = cell.policy
    states = [t.policy for t in traces if t.policy]
    numbers = {k for s in states for k, v in s.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    section: dict[str, Any] = {"engine": backend.name if backend is not None else cell.params.backend}
    # names and flags, as ran ("policy": the engine's name for it, the same as "name" below)
    section |= {k: v for s in states for k, v in s.items() if k not in numbers and k != "policy"}
    section |= {k: statistics.median(s[k] for s in states if k in s) for k in sorted(numbers)}
    return section | {"name": spec.name if spec else "fcfs", "text": spec.text if spec else "fcfs",
                      "label": spec.label if spec else "fcfs", "params": dict(spec.params) if spec else {}}


def cell_record(cell: Cell, model: LoadedModel, traces: list[RunTrace], workload: Workload | None = None,
                backend: Backend | None = None) -> CellRecord:
    """Everything a cell stores: parameters, metrics (median and per round), KV, telemetry, SLO attainment and
    fairness per tenant (against the ``workload`` offered: its requests and SLOs), raw traces; with the
    ``backend`` too, the workload section (how that backend treated the traffic's priorities and prefixes)."""
    ran = traces[-1].policy if traces else {}
    section = ({} if workload is None or backend is None
               else workload_section(workload, backend, cell.params.workload, ran))
    rounds = [compute_metrics(t) for t in traces]
    slo, tenants = slo_sections(traces, workload)
    return CellRecord(
        cell={**cell.describe(), "dtype": model.spec.dtype},
        model={"source": str(model.spec.source), "path": str(model.path), "config_hash": config_hash(model.config),
               "weights": model.weights},
        metrics=summarise(rounds),
        rounds=rounds,
        kv=kv_figures(traces, model.config, model.dtype),
        telemetry=summarise_telemetry([t.telemetry for t in traces]),  # every round's is in its trace
        counters=shared_prefix_counters(summarise_counters([t.counters for t in traces]), section),
        client=summarise_client([t.client for t in traces]),  # every round's is in its trace
        token_count_errors=[f"round {i}: {e}" for i, t in enumerate(traces, 1) for e in token_count_errors(t)],
        traces=[t.to_dict() for t in traces],
        efficiency=efficiency(traces, model.cost(), device_name(model.device), model.spec.dtype),
        workload=section,
        slo=slo,
        tenants=tenants,
        policy=policy_section(cell, backend, traces),
        engine=engine_section(cell, backend),
    )


def engine_section(cell: Cell, backend: Backend | None) -> dict[str, Any]:
    """The record's ``engine`` section: the settings a backend says move its speed (vLLM's, ``engine_settings``);
    empty for a backend that has none."""
    settings = getattr(backend, "engine_settings", None)
    return {} if settings is None else settings(cell.batch_size)
