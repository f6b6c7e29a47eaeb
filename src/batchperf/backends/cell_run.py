"""Run one cell: warm-up requests first (discarded; a failed one fails the cell), then the measured requests."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from batchperf.backends import Backend, CellUnsupported
from batchperf.measure.trace import RunTrace
from batchperf.workload.spec import Workload

if TYPE_CHECKING:
    from batchperf.engine.policies import PolicySpec
    from batchperf.telemetry.sampler import Sampler

FCFS_ONLY = ("fcfs",)  # a backend that declares no ``policies`` runs its own scheduler: fcfs


def policies_of(backend: Backend) -> tuple[str, ...]:
    """The batching policies ``backend`` can run (its ``policies``; fcfs when it names none)."""
    return tuple(getattr(backend, "policies", FCFS_ONLY))


def outside_processes(backend: Backend) -> tuple[int, ...]:
    """The pids of processes outside this process's tree that do ``backend``'s work (its ``outside_processes``: a
    server kept across processes); none for a backend that names none."""
    named = getattr(backend, "outside_processes", None)
    return () if named is None else tuple(named())


def policy_refusal(backend: Backend, policy: PolicySpec | None) -> str | None:
    """Why ``backend`` cannot run ``policy`` (None: it can)."""
    if policy is None or policy.name in policies_of(backend):
        return None
    return (f"policy {policy.text!r} is not one {backend.name} runs: it runs {', '.join(policies_of(backend))} "
            f"(batchperf's continuous engine runs every policy; docs/policies.md)")


def policy_kwargs(backend: Backend, policy: PolicySpec | None) -> dict[str, Any]:
    """``policy=`` for a backend that takes one (it declares ``policies``); nothing for the others (fcfs only)."""
    return {"policy": policy} if policy is not None and hasattr(backend, "policies") else {}


def run_cell(backend: Backend, workload: Workload, batch_size: int, concurrency: int,
             sampler: Sampler | None = None, policy: PolicySpec | None = None) -> RunTrace:
    """The measured trace of ``workload``; its warm-up requests run before and are dropped.

    A ``sampler`` watches the measured run only (not the warm-up); its summary lands in ``trace.telemetry``. Its CPU
    time counts the backend's :func:`outside_processes` too (a kept server, found by the warm-up: a cell without
    warm-up requests finds it in its first run, whose CPU time then misses it).
    ``policy``: the batching policy (warm-up and measured run alike); CellUnsupported when the backend cannot run it.
    """
    if reason := policy_refusal(backend, policy):
        raise CellUnsupported(reason)
    kwargs = policy_kwargs(backend, policy)
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    if workload.warmup:  # a warm-up that fails (a server that never answers) fails the cell now, not rounds later
        warm = backend.run(workload.warmup_only(), batch_size, concurrency, **kwargs)
        if failed := [r for r in warm.requests if r.error is not None]:
            raise RuntimeError(f"{backend.name}: warm-up failed: {len(failed)} of {len(warm.requests)} request(s) "
                               f"({failed[0].error}); the cell is not measured")
    if sampler is None:
        trace = backend.run(workload, batch_size, concurrency, **kwargs)
    else:
        with sampler.counting_also(outside_processes(backend)):
            trace = backend.run(workload, batch_size, concurrency, **kwargs)
        trace.telemetry = sampler.summary(output_tokens=sum(r.output_len for r in trace.requests if r.error is None))
    if trace.requests and all(r.error is not None for r in trace.requests):  # nothing to measure, in any round
        raise RuntimeError(f"{backend.name}: every request of the round failed ({len(trace.requests)} of "
                           f"{len(trace.requests)}): {trace.requests[0].error}; the cell is not measured")
    trace.warmup_excluded = len(workload.warmup)
    return trace
