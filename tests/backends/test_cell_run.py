"""``run_cell``: the processes outside this one's tree that a backend names (a kept server) count in the round's CPU
time; a backend that names none is measured as before."""

from __future__ import annotations

from pathlib import Path

from cpu_burner import Burner

from batchperf.backends.cell_run import outside_processes, run_cell
from batchperf.measure.trace import RequestTrace, RunTrace
from batchperf.telemetry.sampler import Sampler
from batchperf.workload.spec import LengthSpec, Workload, WorkloadSpec

BURN_S = 0.5


class _KeptServerBackend:
    """Its work is done by a process outside this one's tree (as a kept vllm-server's), which it names."""

    name = "fake-kept"

    def __init__(self, burner: Burner) -> None:
        self.burner = burner
        self.runs = 0

    def outside_processes(self) -> tuple[int, ...]:
        return (self.burner.pid,)

    def run(self, workload: Workload, batch_size: int, concurrency: int) -> RunTrace:
        self.runs += 1
        if self.runs == 2:  # the measured run (the first is the warm-up)
            self.burner.burn()
        reqs = [RequestTrace(r.request_id, r.prompt_len, r.target_len, 0.0, 0.0, (0.1, 0.2)) for r in workload.requests]
        return RunTrace(self.name, batch_size, concurrency, reqs, end=0.2)

    def close(self) -> None:
        pass


def test_the_cpu_time_of_a_process_the_backend_names_is_the_cells(tmp_path: Path) -> None:
    workload = WorkloadSpec(3, LengthSpec.parse("8"), num_warmup=1).build(100, 64)
    burner = Burner.start(tmp_path, BURN_S, detach=True)
    try:
        backend = _KeptServerBackend(burner)
        assert outside_processes(backend) == (burner.pid,)
        trace = run_cell(backend, workload, 2, 2, sampler=Sampler("cpu", interval_s=0.05))
    finally:
        burner.stop()
    assert trace.telemetry["cpu_s"] >= 0.9 * BURN_S  # read in 10 ms ticks, the sampler thread's own taken off
    assert trace.telemetry["cpu_seconds_per_output_token"] == trace.telemetry["cpu_s"] / 6  # 3 requests x 2 tokens


def test_a_backend_that_names_no_outside_process_has_none() -> None:
    class Plain:
        name = "plain"

    assert outside_processes(Plain()) == ()  # type: ignore[arg-type]
