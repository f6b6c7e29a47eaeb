"""Baselines on disk: ``baselines/<fingerprint>/baseline.json`` and its ``history.jsonl``.

A baseline *is* a results file (``pytest-benchmark compare`` reads it, and so
does :func:`batchperf.results.io.read_results`), whose cells keep their metrics,
every round, KV and telemetry (the bulky raw traces and the gate's notes are
dropped), and whose top level adds::

    "batchperf_baseline": {"schema": 1, "fingerprint": {...}, "provenance": {...}}

Writes are atomic (:func:`batchperf.results.io.write_results`) under an
exclusive lock, so a baseline is always either the old one or the new one.
Every refresh appends its provenance to ``history.jsonl``. Every error is a
:class:`~batchperf.results.record.ResultsError` naming the file, the problem
and the way out.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from batchperf.measure.client_lag import summarise as summarise_client
from batchperf.measure.metrics import summarise
from batchperf.regress.fingerprint import REFRESH_HINT, Fingerprint, cell_identity, identity_diff, version_diff
from batchperf.regress.machine import PROBE_KEY, pooled_probes, session_probes
from batchperf.regress.safe_open import make_folder, open_problem, open_regular, refuse_link
from batchperf.results.claim import CannotOpen, ClaimError, Held, claim
from batchperf.results.io import INCOMPLETE_KEY, ResultsFile, read_results, write_results
from batchperf.results.record import CellRecord, ResultsError

SCHEMA = 1  # of the batchperf_baseline block
BASELINE_FILE = "baseline.json"
HISTORY_FILE = "history.jsonl"
LOCK_FILE = ".refresh.lock"
DEFAULT_ROOT = Path("baselines")
BLOCK = "batchperf_baseline"


def folder_for(root: Path, fingerprint: Fingerprint) -> Path:
    return root / fingerprint.key


def pinned_path(root: Path, fingerprint: Fingerprint) -> Path:
    return folder_for(root, fingerprint) / BASELINE_FILE


def older_pin(root: Path, fingerprint: Fingerprint) -> str | None:
    """When this machine has no pinned baseline but one sits under the key its identity had before it named the
    CPU's family, model, stepping and instruction sets (and the GPUs' compute capability): what that baseline lacks
    and the refresh that re-pins it; None otherwise. It is never compared: that key covered CPUs 2-3x apart."""
    older = fingerprint.identity.older()
    path = root / older.key / BASELINE_FILE
    if older == fingerprint.identity or not path.exists():
        return None
    return (f"{path} was pinned by an older batchperf: its identity lacks {', '.join(older.lacks())}, so it is not "
            f"compared (one CPU model name covers CPUs 2-3x apart). Re-pin it on this machine with `{REFRESH_HINT}`")


def _fingerprint(path: Path, raw: Any, where: str) -> Fingerprint:
    try:
        return Fingerprint.from_dict(raw)
    except ValueError as exc:
        raise ResultsError(path, f"{where} is not a fingerprint ({exc})",
                           "Re-run the cells with this batchperf, or restore the file from git") from None


def fingerprint_of(run: ResultsFile) -> Fingerprint | None:
    """The hardware and versions ``run`` was measured with: a baseline's pinned fingerprint (its block), else the
    one the gate plugin recorded (``machine_info.batchperf``); None when neither is there.

    Parsed on every call (a few small dicts): :class:`ResultsFile` is the results stage's and cannot hold a
    regress type. The loaders below call it once, so a file they return always parses."""
    block = run.header.get(BLOCK)
    if isinstance(block, dict):
        return _pinned_fingerprint(run.path, block)
    raw = run.fingerprint
    return None if raw is None else _fingerprint(run.path, raw, "machine_info.batchperf")


def _pinned_fingerprint(path: Path, block: dict[str, Any]) -> Fingerprint:
    return _fingerprint(path, block.get("fingerprint"), "its fingerprint")


def provenance_of(run: ResultsFile) -> dict[str, Any]:
    """A baseline's provenance (who pinned it, when, why); empty for a results file."""
    block = run.header.get(BLOCK)
    return dict(block.get("provenance") or {}) if isinstance(block, dict) else {}


def load_run(path: Path) -> ResultsFile:
    """A results file written by ``pytest --benchmark-json`` with batchperf cells."""
    file = read_results(path)
    fingerprint_of(file)  # a bad fingerprint is refused here, naming the file, not later in a comparison
    return file


def load_baseline(path: Path, expected: Fingerprint | None = None) -> ResultsFile:
    """A pinned baseline; ``expected`` (this machine) must have the same hardware identity."""
    file = read_results(path, "baseline")
    block = file.header.get(BLOCK)
    if not isinstance(block, dict):
        raise ResultsError(path, f"has no '{BLOCK}' block: it is a results file, not a baseline",
                           f"Make a baseline from it with `batchperf refresh {path} --reason ...`")
    if block.get("schema") != SCHEMA:
        raise ResultsError(path, f"has baseline schema {block.get('schema')!r}; this batchperf reads schema {SCHEMA}",
                           "Use the batchperf version that wrote it, or make a new baseline with `batchperf refresh`")
    fingerprint = _pinned_fingerprint(path, block)
    if expected is not None and fingerprint.key != expected.key:
        raise ResultsError(
            path, f"was made on other hardware ({fingerprint.identity.describe()}, fingerprint {fingerprint.key}); "
            f"this machine is {expected.identity.describe()} ({expected.key})",
            f"Compare against the right file with --benchmark-compare=PATH, or make this machine's baseline with "
            f"`batchperf refresh` (it goes to {path.parent.parent / expected.key})")
    return file


def load_reference(path: Path) -> ResultsFile:
    """A baseline, or failing that a results file (comparing two runs is legitimate too)."""
    file = read_results(path)
    return load_baseline(path) if BLOCK in file.header else load_run(path)


def pool_runs(runs: list[ResultsFile]) -> ResultsFile:
    """Several runs of the same cells as one: every cell's rounds concatenated, its metrics the median over all.

    A baseline pooled from separate runs carries their run-to-run spread in ``rounds``,
    which the gate's k × spread tolerance then honours (A/A noise measured, not guessed).
    """
    if len(runs) == 1:
        return runs[0]
    first = runs[0]
    for run in runs[1:]:
        if diffs := _pooling_diffs(first, run):
            raise ResultsError(run.path, f"cannot be pooled with {first.path}: {'; '.join(diffs)}",
                               "Pool only runs of the same commit, versions and hardware")
    cells: dict[str, CellRecord] = {}
    benches: dict[str, dict[str, Any]] = {}
    clients: dict[str, list[dict[str, Any]]] = {}  # each run's client-lag check of a cell
    for run in runs:
        for name, rec in run.cells.items():
            pooled = cells.get(name)
            if pooled is None:
                cells[name] = replace(rec, rounds=list(rec.rounds), token_count_errors=list(rec.token_count_errors),
                                      pooled_runs=1)
                benches[name] = run.benches[name]
                continue
            if diff := identity_diff(cell_identity(pooled), cell_identity(rec)):
                raise ResultsError(run.path, f"{name} differs from the other runs: {'; '.join(diff)}",
                                   "Pool only runs of the same cells")
            pooled.rounds += rec.rounds
            pooled.token_count_errors += rec.token_count_errors
            pooled.pooled_runs = (pooled.pooled_runs or 1) + 1
            clients.setdefault(name, [pooled.client]).append(rec.client)
    for name, rec in cells.items():
        if (rec.pooled_runs or 1) > 1 and rec.rounds:
            rec.metrics = summarise(rec.rounds)
        if any(clients.get(name, [])):  # a run whose client lagged marks the pooled cell (its rounds are in it)
            rec.client = summarise_client(clients[name], label="run")
    dirty = any(r.commit_info.get("dirty") for r in runs)
    header = {**first.header, "commit_info": {**first.commit_info, "dirty": dirty}}
    if (probes := pooled_probes([session_probes(r) for r in runs])) is not None:  # the machine of every run
        header["machine_info"] = {**first.machine_info, PROBE_KEY: probes.to_dict()}
    if incomplete := [f"{r.path}: {why}" for r in runs if (why := r.incomplete)]:  # one cut run: all cut
        header[INCOMPLETE_KEY] = {"reason": "; ".join(incomplete)}
    sources = tuple(src for r in runs for src in r.sources)
    digest = hashlib.sha256("".join(sha for _, sha in sources).encode()).hexdigest()
    # the first run's header, hence its fingerprint: _pooling_diffs made sure the others' identity and versions match
    return ResultsFile(first.path, header, cells, benches, (), digest, sources)


def _pooling_diffs(first: ResultsFile, run: ResultsFile) -> list[str]:
    diffs: list[str] = []
    if (fp_first := fingerprint_of(first)) is not None and (fp_run := fingerprint_of(run)) is not None:
        diffs += identity_diff(fp_first.identity.to_dict(), fp_run.identity.to_dict())
        versions = version_diff(fp_first.upgrade, fp_run.upgrade)
        diffs += [f"{k}: {a} → {b}" for k, (a, b) in versions.items()]
    commits = [r.commit_info.get("id") for r in (first, run)]
    if commits[0] != commits[1]:
        diffs.append(f"commit: {commits[0]} → {commits[1]}")
    return diffs


def read_history(folder: Path) -> list[dict[str, Any]]:
    path = folder / HISTORY_FILE
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    out = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            if n == len(lines):  # an append cut short by a crash: the lines before it still hold
                continue
            raise ResultsError(path, f"line {n} is not JSON", "Restore the file from git") from None
    return out


# --- writing --------------------------------------------------------------------------------------


class LockHeld(ResultsError):
    pass


@contextlib.contextmanager
def locked(folder: Path) -> Iterator[None]:
    """Exclusive, non-blocking lock on ``folder``; released by the OS even if the holder dies.

    The lock file is opened without following a symlink and never truncated or written: it may be a
    committed symlink or a hard link to a file that matters (:mod:`batchperf.results.claim`).
    """
    make_folder(folder)
    try:
        held = claim(folder, LOCK_FILE, tidy=False)  # the lock file stays: it may be committed
    except CannotOpen as exc:
        raise open_problem(exc.lock, exc.error) from None
    except Held as exc:
        raise LockHeld(folder / LOCK_FILE, f"another baseline refresh holds the lock ({exc.reason})",
                       "Wait for it to finish and run again; nothing was written") from None
    except ClaimError as exc:  # the folder went away, or became a file, since make_folder
        raise ResultsError(folder, f"cannot create the baseline folder ({exc.reason})",
                           "Pass a writable folder with --baselines DIR") from None
    with held:
        yield


def append_history(folder: Path, provenance: dict[str, Any]) -> list[str]:
    """Append one provenance line to ``history.jsonl``; returns notes about what had to be repaired first.

    A last line without its newline is either a complete entry (written by hand, or by ``printf %s``):
    kept, its newline added; or an append a crash cut short, which does not parse: only that is
    dropped, and the returned note says so.
    """
    path = folder / HISTORY_FILE
    notes: list[str] = []
    fd = open_regular(path, os.O_RDWR | os.O_CREAT | os.O_APPEND)
    with os.fdopen(fd, "r+b") as fh:
        raw = fh.read()
        head = b""
        if raw and not raw.endswith(b"\n"):
            start = raw.rfind(b"\n") + 1
            if _parses(raw[start:]):
                head = b"\n"
            else:
                os.ftruncate(fd, start)
                notes.append(f"{path}: dropped a torn last line ({len(raw) - start} bytes, "
                             f"{raw[start:start + 40]!r}…): an append cut short by a crash")
        fh.write(head + json.dumps(provenance, sort_keys=True).encode() + b"\n")
        fh.flush()
        os.fsync(fd)
    return notes


def _parses(line: bytes) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False


def baseline_record(record: CellRecord) -> CellRecord:
    """A cell as a baseline stores it: no raw traces (in results files, not in committed baselines), no gate notes."""
    return replace(record, traces=[], gate=None, gate_remeasured=None)


def write_baseline(folder: Path, template: dict[str, Any], entries: list[dict[str, Any]],
                   fingerprint: Fingerprint, provenance: dict[str, Any]) -> list[str]:
    """Write ``folder/baseline.json`` atomically, then append ``provenance`` to the history. Hold :func:`locked`.

    Returns the notes of :func:`append_history`."""
    header = {**template, BLOCK: {"schema": SCHEMA, "fingerprint": fingerprint.to_dict(), "provenance": provenance}}
    refuse_link(folder / HISTORY_FILE)  # before the baseline changes: never a new baseline without its history line
    write_results(folder / BASELINE_FILE, header, entries)
    # A crash right here leaves the history one entry short; missing_history_entry() finds it next time.
    return append_history(folder, provenance)


def missing_history_entry(folder: Path) -> dict[str, Any] | None:
    """The current baseline's provenance when a crash kept it out of the history (to append), else None.

    Reads only, so a dry run can say what a refresh would repair."""
    path = folder / BASELINE_FILE
    if not path.exists():
        return None
    try:
        provenance = json.loads(path.read_text(encoding="utf-8"))[BLOCK]["provenance"]
    except (ValueError, KeyError, TypeError):
        return None
    ids = {h.get("id") for h in read_history(folder)}
    if isinstance(provenance, dict) and provenance.get("id") and provenance["id"] not in ids:
        return {**provenance, "recovered": "appended after an interrupted refresh"}
    return None
