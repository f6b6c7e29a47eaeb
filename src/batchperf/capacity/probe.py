"""The probes of ``batchperf capacity``: at each load the search asks for, one child pytest of the one cell the
matrix options select, at ``--batchperf-load X``, into its own results file, whose attainment the search reads.

The command is ``batchperf run``'s (:func:`batchperf.launch.suite.tier_command`), its load replacing any the user
gave, the reference load after it (:data:`batchperf.capacity.search.REFERENCE_LOAD`). The child runs under the
launcher's guard (:func:`batchperf.launch.child.run_guarded`): inside ``stop_signals()`` a Ctrl-C or SIGTERM stops
it and raises ``Stopped`` here, so the search ends as interrupted (130, 143) instead of reading a cut probe.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from batchperf.capacity.record import probe_records, probe_result, reference_rate, write_capacity
from batchperf.capacity.search import REFERENCE_LOAD, Capacity, ProbeResult, SearchSettings, search
from batchperf.launch.child import run_guarded
from batchperf.launch.suite import tier_command
from batchperf.results.io import read_results
from batchperf.results.record import CellRecord


class ProbeFailed(RuntimeError):
    """A probe's pytest wrote no results; the message names the load, pytest's exit code and the command."""


def run_child(cmd: list[str]) -> int:
    """The probe's pytest to its end, its exit code; ``Stopped`` once it has ended when a stop signal came."""
    return run_guarded(cmd).returncode


@dataclass(frozen=True, slots=True)
class Probes:
    """How each probe runs: ``batchperf run``'s arguments and the folder of the probes' results files."""

    suite: Path
    tier: str
    options: Mapping[str, object]  # the matrix options (``batchperf_*`` -> value) as the user gave them
    passthrough: tuple[str, ...]  # the pytest arguments after ``--``
    folder: Path
    files: list[tuple[float, Path]] = field(default_factory=list)  # (load, results file) of each probe run so far

    def command(self, load: float, out: Path) -> list[str]:
        """The child pytest of one probe: the run's arguments, its load replacing any the user gave, followed by
        the reference load (the same cell saturated, in the same process: the machine's speed now)."""
        options = {k: v for k, v in self.options.items() if k != "batchperf_load"}
        loads = f"{load:g}" if load == REFERENCE_LOAD else f"{load:g},{REFERENCE_LOAD:g}"
        return tier_command(self.tier, options, out, suite=self.suite,
                            passthrough=[*self.passthrough, f"--batchperf-load={loads}"])

    def run(self, load: float) -> ProbeResult:
        """One probe at ``load``; ProbeFailed when its pytest wrote no results."""
        path = self.folder / f"probe{len(self.files) + 1:02d}-load{load:g}.json"
        cmd = self.command(load, path)
        try:
            code = run_child(cmd)
        except KeyboardInterrupt:  # stopped mid-probe: what it wrote is a cut run, never one of the search's probes
            if path.exists():
                path.replace(path.with_name(f"{path.stem}-interrupted.json"))
            raise
        if not path.exists():
            raise ProbeFailed(f"the probe at load {load:g} wrote no results (pytest exit {code}); "
                              f"run it alone to see why: {' '.join(cmd)}")
        self.files.append((load, path))
        probe, reference = probe_records(read_results(path, "probe results"), load)
        return probe_result(probe, reference_rate(reference))


def find_capacity(probes: Probes, settings: SearchSettings, out: Path,
                  heard: Callable[[float, ProbeResult], None] = lambda load, got: None) -> tuple[Capacity, CellRecord]:
    """Search, one probe at a time (``heard`` is told each probe's result), and write the capacity results file
    ``out`` from the probe nearest the capacity. ProbeFailed, ResultsError as they come."""
    probes.folder.mkdir(parents=True, exist_ok=True)

    def probe(load: float) -> ProbeResult:
        got = probes.run(load)
        heard(load, got)
        return got

    capacity = search(probe, settings)
    load, path = nearest(probes.files, capacity.max_load)
    return capacity, write_capacity(out, path, capacity, load)


def nearest(files: list[tuple[float, Path]], load: float) -> tuple[float, Path]:
    """The probe file whose load is nearest ``load`` (as a ratio; the last of equals: the latest run), the last one
    when ``load`` is 0 (no capacity)."""
    if load <= 0:
        return files[-1]
    return min(reversed(files), key=lambda f: abs(math.log(f[0] / load)))
