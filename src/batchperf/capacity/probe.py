"""The probes of ``batchperf capacity``: at each load the search asks for, one child pytest of the one cell the
matrix options select, at ``--batchperf-load X``, into its own results file, whose attainment the search reads.

The command is ``batchperf run``'s (:func:`batchperf.launch.suite.tier_command`), its load replacing any the user
gave, the reference load after it (:data:`batchperf.capacity.search.REFERENCE_LOAD`). The child runs under the
launcher's guard (:func:`batchperf.launch.child.run_guarded`): inside ``stop_signals()`` a Ctrl-C or SIGTERM stops
it and raises ``Stopped`` here, so the search ends as interrupted (130, 143) instead of reading a cut probe.

The probes a search leaves in its folder (``probeNN-loadX.json``) are read back by :func:`capacity_from_probes`
(``batchperf capacity --from-probes``): the capacity record an interrupted search did not write, or one written again
with other settings or a newer fit.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from batchperf.capacity.record import probe_records, probe_result, reference_rate, write_capacity
from batchperf.capacity.search import REFERENCE_LOAD, Capacity, ProbeResult, SearchSettings, search, standing
from batchperf.launch.child import run_guarded
from batchperf.launch.suite import tier_command
from batchperf.results.io import ResultsFile, read_results
from batchperf.results.record import CellRecord, ResultsError

PROBE_FILE = re.compile(r"probe([0-9]+)-load([0-9.e+]+)\.json")  # Probes.run's names; "-interrupted" ones are cut


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
        return read_probe(path, load)


def read_probe(path: Path | ResultsFile, load: float) -> ProbeResult:
    """What the probe in results file ``path`` (or its contents, read) measured at ``load``, its reference's rate
    with it."""
    results = path if isinstance(path, ResultsFile) else read_results(path, "probe results")
    probe, reference = probe_records(results, load)
    return probe_result(probe, reference_rate(reference))


def kept_probes(folder: Path) -> list[tuple[float, Path]]:
    """The probes a search left in ``folder``: (load, results file), in the order they ran. A probe a stop cut
    (``-interrupted.json``) is not one; ResultsError when there are none."""
    found = sorted((int(m[1]), float(m[2]), path) for path in folder.glob("probe*-load*.json")
                   if (m := PROBE_FILE.fullmatch(path.name)))
    if not found:
        raise ResultsError(folder, "no probe results (probeNN-loadX.json) in it",
                           "Give the folder a search kept its probes in: OUT-probes/ beside its --out, or its "
                           "--probes-dir")
    return [(load, path) for _, load, path in found]


def probes_seconds(probes: list[ResultsFile]) -> float:
    """The search's wall time as its probes' files tell it: first written to last, plus one probe's time (the mean
    gap between them) for the first probe's own run; with one probe, the seconds its cells were timed (a lower
    bound: its process's start is not in the file)."""
    if len(probes) == 1:
        return sum(float(bench.get("stats", {}).get("total") or 0.0) for bench in probes[0].benches.values())
    written = [_written(results) for results in probes]
    return (max(written) - min(written)) * len(probes) / (len(probes) - 1)


def _written(results: ResultsFile) -> float:
    """When the probe's file was written (its ``datetime``, pytest-benchmark's; else the file's own time), unix s."""
    try:
        return datetime.fromisoformat(results.datetime).timestamp()
    except ValueError:
        return results.path.stat().st_mtime


def capacity_from_probes(folder: Path, settings: SearchSettings, out: Path) -> tuple[Capacity, CellRecord]:
    """The capacity results file ``out`` from the probes a search left in ``folder``, as the search would have
    written it at its end with ``settings`` (:func:`batchperf.capacity.search.standing`). ResultsError as they
    come, and when the probes stopped before they bracketed the crossing (nothing to write but a 0 or a bound)."""
    files = kept_probes(folder)
    read = [read_results(path, "probe results") for _, path in files]
    runs = tuple((load, read_probe(results, load)) for (load, _), results in zip(files, read))
    capacity = standing(runs, settings, probes_seconds(read))
    if capacity.fit is None and capacity.stopped == "probes":  # no bracket, no stop: a 0 or a lower bound, unjudged
        side = "met" if runs[0][1].attainment >= settings.target else "missed"
        raise ResultsError(folder, f"its {len(runs)} probe(s) all {side} the target {settings.target:.0%} (loads "
                           f"{', '.join(f'{load:g}' for load, _ in runs)}): they never bracketed the capacity, so "
                           "no capacity can be written from them", "Run the search again, from a --start on the "
                           "other side")
    load, path = nearest(files, capacity.max_load)
    return capacity, write_capacity(out, path, capacity, load)


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
