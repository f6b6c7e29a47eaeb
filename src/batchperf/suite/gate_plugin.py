"""The regression gate inside pytest: which baseline, one check per cell, the summary.

``--benchmark-compare`` (no value) is taken over before pytest-benchmark reads
it: it names this machine's pinned ``baselines/<fingerprint>/baseline.json``
(never the last run saved under ``.benchmarks``), so pytest-benchmark's own
comparison table and ``--benchmark-compare-fail`` use the same file.
``--benchmark-compare=PATH`` compares with that file (a baseline or a results
file). Each cell calls :func:`gate_cell` once with its record; a first violation is
re-measured and only a confirmed regression fails the test (:func:`gate_outcome`,
after the record is stored), with the one-table message. This plugin is loaded by ``batchperf.suite.plugin``.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from batchperf.launch.environ import BASELINE_PYTHON_ENV
from batchperf.regress import fingerprint as fp
from batchperf.regress.compare import add_gate_args, gate_config
from batchperf.regress.gate import GateConfig, compare_cell, confirm, render_table
from batchperf.regress.machine import MACHINE_NOTE, SessionProbes, machine_moved, session_probes
from batchperf.regress.store import (
    DEFAULT_ROOT,
    fingerprint_of,
    load_baseline,
    load_reference,
    older_pin,
    pinned_path,
)
from batchperf.regress.verdict import CellVerdict, Verdict, count_line, fmt_delta
from batchperf.results.io import ResultsFile
from batchperf.results.record import CellRecord, ResultsError
from batchperf.telemetry.probe import probe


@dataclass(slots=True)
class GateSession:
    # this machine's; read when first needed (py-cpuinfo takes about a second): a session that neither compares nor
    # writes results never pays for it
    fingerprint: fp.Fingerprint | None
    config: GateConfig
    require_baseline: bool
    baseline: ResultsFile | None = None
    baseline_fingerprint: fp.Fingerprint | None = None  # the baseline's, parsed once when it is loaded
    baseline_probes: SessionProbes | None = None  # the machine probes the baseline's session recorded
    source: str = ""  # what the cells are compared with, for the summary
    active: bool = False  # --benchmark-compare was given
    verdicts: list[CellVerdict] = field(default_factory=list)


GATE = pytest.StashKey[GateSession]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("batchperf-gate", "batchperf: baselines and the regression gate")
    group.addoption("--batchperf-baselines", dest="batchperf_baselines", default=None, metavar="DIR",
                    help="baselines root holding <fingerprint>/baseline.json (default: <rootdir>/baselines)")
    group.addoption("--batchperf-require-baseline", dest="batchperf_require_baseline", action="store_true",
                    help="fail a cell that has no comparable baseline (default: report it in the summary)")
    add_gate_args(group)


def pytest_configure(config: pytest.Config) -> None:
    # Runs before pytest-benchmark's own (trylast) pytest_configure, which reads benchmark_compare.
    try:
        gate = GateSession(None, gate_config(config.getoption("batchperf_k"), config.getoption("batchperf_tolerance"),
                                             config.getoption("batchperf_machine_moved")),
                           config.getoption("batchperf_require_baseline"))
    except ValueError as exc:
        raise pytest.UsageError(f"batchperf gate: {exc}") from None
    config.stash[GATE] = gate
    compare = config.getoption("benchmark_compare", None)
    if not compare:
        return
    gate.active = True
    gate.fingerprint = fp.current()
    if compare is True:
        root = config.getoption("batchperf_baselines") or config.rootpath / DEFAULT_ROOT
        path = pinned_path(Path(root), gate.fingerprint)
        if not path.exists():
            older = older_pin(Path(root), gate.fingerprint)
            gate.source = f"no pinned baseline for this machine at {path}" + (f"; {older}" if older else "")
            config.option.benchmark_compare = []  # keep pytest-benchmark off the last saved run
            return
        try:
            gate.baseline = load_baseline(path, gate.fingerprint)
            gate.baseline_fingerprint = fingerprint_of(gate.baseline)
            gate.baseline_probes = session_probes(gate.baseline)
        except ResultsError as exc:
            raise pytest.UsageError(f"batchperf gate: {exc}") from None
        config.option.benchmark_compare = str(path)  # pytest-benchmark's table and --benchmark-compare-fail
        gate.source = str(path)
        return
    path = Path(compare)
    if not path.is_file():
        # A folder, a typo or a pytest-benchmark run id would switch the gate off without a word (issue 14):
        # the gate compares with a file or not at all.
        what = "is a folder" if path.is_dir() else "no such file"
        raise pytest.UsageError(
            f"batchperf gate: --benchmark-compare={compare}: {what}; expected the path of a baseline.json or a "
            "results JSON file (e.g. baselines/<fingerprint>/baseline.json), or --benchmark-compare with no value "
            "for this machine's pinned baseline")
    try:
        gate.baseline = load_reference(path)
        gate.baseline_fingerprint = fingerprint_of(gate.baseline)
        gate.baseline_probes = session_probes(gate.baseline)
    except ResultsError as exc:
        raise pytest.UsageError(f"batchperf gate: {exc}") from None
    gate.source = str(path)


def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict[str, Any]) -> None:
    """Record the fingerprint in every results file: the refresh tool files it under this hardware."""
    if (gate := config.stash.get(GATE, None)) is not None:
        if gate.fingerprint is None:  # pytest-benchmark has just read py-cpuinfo: the same dict, not a second read
            gate.fingerprint = fp.current(cpu=machine_info.get("cpu"))
        machine_info["batchperf"] = gate.fingerprint.to_dict()


def gate_cell(request: pytest.FixtureRequest, record: CellRecord,
              remeasure: Callable[[], CellRecord] | None = None) -> CellVerdict | None:
    """Compare one cell with the baseline and note the verdict in ``record.gate``; fails the test on a confirmed
    regression. None: no comparison asked."""
    config = request.config
    gate = config.stash.get(GATE, None)
    if gate is None or not gate.active:
        return None
    base = None if gate.baseline is None else gate.baseline.find(request.node.nodeid, record.id)
    verdict = _compare(gate, base, record)
    if (verdict.failed or verdict.void) and remeasure is not None:  # a miss, or a throttled card: once more
        again = remeasure()
        verdict = confirm(verdict, _compare(gate, base, again))
        record.gate_remeasured = {"metrics": again.metrics, "rounds": again.rounds}
    machine = {}
    if verdict.verdict is Verdict.REGRESSION:  # was it the machine? probe it now, beside the verdict
        now = probe()
        verdict = machine_moved(verdict, record, gate.baseline_probes, now, gate.config.machine_moved, base)
        machine = {"machine_probe": now.to_dict()}
    record.gate = {"verdict": verdict.verdict.value, "remeasured": verdict.remeasured,
                   "regressed": [m.name for m in verdict.metrics if m.verdict.failed and m.deciding], **machine}
    gate.verdicts.append(verdict)
    return verdict


def gate_outcome(request: pytest.FixtureRequest, verdict: CellVerdict | None) -> None:
    """Fail the test when the gate's verdict says so (after the record has been stored)."""
    gate = request.config.stash.get(GATE, None)
    if verdict is None or gate is None:
        return
    if verdict.failed:
        pytest.fail(render_table(verdict) + ab_hint(request.node.nodeid), pytrace=False)
    if verdict.verdict is Verdict.NO_BASELINE and gate.require_baseline:
        pytest.fail(f"batchperf gate: {verdict.name}: no comparable baseline in {gate.source or 'any file'}: "
                    + "; ".join(verdict.notes)
                    + ". Make one with `batchperf refresh`, or drop --batchperf-require-baseline", pytrace=False)
    if verdict.verdict.unjudged and gate.require_baseline:  # too noisy, or a baseline value it cannot judge
        pytest.fail(render_table(verdict) + f"\nbatchperf gate: {verdict.name}: {verdict.verdict.value} "
                    f"against {gate.source}. Re-pin the baseline (batchperf refresh --repeat 3 on a quiet machine), "
                    "or drop --batchperf-require-baseline", pytrace=False)


def ab_hint(nodeid: str) -> str:
    """The ``batchperf ab`` command that confirms a regression side by side, when the baseline's environment is
    named by ``BATCHPERF_BASELINE_PYTHON`` (its interpreter or virtualenv); else how to name it."""
    baseline = os.environ.get(BASELINE_PYTHON_ENV, "").strip()
    if not baseline:
        return (f"\nTo confirm it side by side with the baseline's environment, set {BASELINE_PYTHON_ENV} to that "
                "environment's python: this message then ends with the `batchperf ab` command.")
    command = shlex.join(["batchperf", "ab", "--a", baseline, "--b", sys.executable, "--", nodeid])
    return ("\nConfirm it side by side (A = the baseline's environment, B = this one; interleaved fresh processes):"
            f"\n  {command}")


def _compare(gate: GateSession, base: CellRecord | None, record: CellRecord) -> CellVerdict:
    """``record`` against ``base``, the baseline's entry for its cell (None: the baseline has none)."""
    if gate.baseline is None:
        return CellVerdict(record.id, Verdict.NO_BASELINE, notes=(gate.source,))
    return compare_cell(record.id, base, record, gate.config, gate.baseline_fingerprint, gate.fingerprint)


def summary_lines(gate: GateSession) -> list[str]:
    if not gate.active:
        return []
    lines = [f"compared with {gate.source or '(nothing)'}: " + (count_line(gate.verdicts) or "no cell checked")]
    for v in gate.verdicts:
        if v.failed:
            worst = ", ".join(f"{m.name} {fmt_delta(m) if m.measured is not None else 'missing'}"
                              for m in v.metrics if m.verdict.failed and m.deciding)
            lines.append(f"REGRESSION {v.name}: {worst}"
                         + "".join(f" ({n})" for n in v.notes if n.startswith(MACHINE_NOTE)))
        elif v.verdict is Verdict.IMPROVEMENT:
            better = ", ".join(f"{m.name} {fmt_delta(m)}" for m in v.metrics if m.verdict is Verdict.IMPROVEMENT)
            lines.append(f"improvement {v.name}: {better} — refresh suggested (batchperf refresh)")
        elif v.verdict is Verdict.NO_BASELINE:
            lines.append(f"no baseline {v.name}: " + "; ".join(v.notes[:4]) + (" …" if len(v.notes) > 4 else ""))
        elif v.verdict in (Verdict.INCONCLUSIVE, Verdict.NOT_JUDGED):
            by_note: dict[str, list[str]] = {}  # one client-bound reason for all the latencies it covers
            for m in v.metrics:
                if m.verdict is v.verdict:
                    by_note.setdefault(m.note, []).append(m.name)
            why = list(v.notes[:1]) if v.void else (  # a void cell: the card's state first, not a metric's
                [f"{', '.join(names)} ({note})" for note, names in by_note.items()] or list(v.notes))
            lines.append(f"{v.verdict.value} {v.name}: " + "; ".join(why))
        elif v.remeasured:
            lines.append(f"noise {v.name}: a first violation was not confirmed by the re-measurement")
    compared = [v for v in gate.verdicts if v.metrics]
    if compared:
        ref = compared[0]
        if ref.versions:
            lines.append("versions that differ from the baseline: "
                         + ", ".join(f"{k} {a} → {b}" for k, (a, b) in ref.versions.items()))
        lines += [f"note: {w}" for w in ref.warnings]
    return lines


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    gate = config.stash.get(GATE, None)
    lines = summary_lines(gate) if gate is not None else []
    if lines:
        terminalreporter.section("batchperf gate")
        for line in lines:
            terminalreporter.write_line(line)
