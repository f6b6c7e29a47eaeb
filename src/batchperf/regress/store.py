"""Baselines on disk: ``baselines/<fingerprint>/baseline.json`` and its ``history.jsonl``.

A baseline *is* a pytest-benchmark JSON file (``pytest-benchmark compare`` reads
it), whose benchmarks keep batchperf's ``extra_info`` (metrics, every round,
KV, memory; the bulky raw traces are dropped) and whose top level adds::

    "batchperf_baseline": {"schema": 1, "fingerprint": {...}, "provenance": {...}}

Writes are atomic (temporary file in the same folder, fsync, rename, fsync of
the folder) under an exclusive lock, so a baseline is always either the old
one or the new one. Every refresh appends its provenance to ``history.jsonl``.
Every error names the file, the problem and the way out.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from batchperf.regress.fingerprint import Fingerprint, cell_identity, identity_diff, version_diff
from batchperf.suite.cell import SCHEMA_VERSION as RESULTS_SCHEMA  # of each cell's extra_info
from batchperf.suite.cell import summarise

SCHEMA = 1  # of the batchperf_baseline block
BASELINE_FILE = "baseline.json"
HISTORY_FILE = "history.jsonl"
LOCK_FILE = ".refresh.lock"
DEFAULT_ROOT = Path("baselines")
REQUIRED_CELL_FIELDS = ("cell", "metrics")
# Raw timestamps and the gate's own notes: in results files, not in committed baselines.
DROPPED_FIELDS = ("traces", "gate", "gate_remeasured")


class BaselineError(Exception):
    """A baseline or results file that cannot be used; the message names the file, the problem and the fix."""

    def __init__(self, path: Path | str, problem: str, fix: str) -> None:
        self.path, self.problem, self.fix = Path(path), problem, fix
        super().__init__(f"{path}: {problem}. {fix}")


@dataclass(frozen=True, slots=True)
class RunFile:
    """A pytest-benchmark JSON file with batchperf cells: a results file or a baseline."""

    path: Path
    data: dict[str, Any]
    fingerprint: Fingerprint | None
    entries: dict[str, dict[str, Any]]  # pytest fullname -> benchmark entry
    sha256: str
    provenance: dict[str, Any] = field(default_factory=dict)
    sources: tuple[tuple[str, str], ...] = ()  # (file, sha256) of every results file pooled into this one

    def extra_info(self, fullname: str) -> dict[str, Any] | None:
        entry = self.entries.get(fullname)
        return entry["extra_info"] if entry else None

    def find(self, fullname: str, cell_id: str | None = None) -> dict[str, Any] | None:
        """The entry of ``fullname``, else the single entry whose cell id is ``cell_id`` (tests that moved)."""
        if fullname in self.entries:
            return self.entries[fullname]["extra_info"]
        same = [e for e in self.entries.values() if cell_id and e["extra_info"]["cell"].get("id") == cell_id]
        return same[0]["extra_info"] if len(same) == 1 else None

    @property
    def cell_ids(self) -> dict[str, str]:
        return {name: e["extra_info"]["cell"].get("id", name) for name, e in self.entries.items()}


def folder_for(root: Path, fingerprint: Fingerprint) -> Path:
    return root / fingerprint.key


def pinned_path(root: Path, fingerprint: Fingerprint) -> Path:
    return folder_for(root, fingerprint) / BASELINE_FILE


def _read_json(path: Path, what: str) -> tuple[dict[str, Any], str]:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise BaselineError(path, f"no such {what} file", "Check the path") from None
    except OSError as exc:
        raise BaselineError(path, f"cannot read the {what} file ({exc.strerror})", "Check its permissions") from None
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        fix = ("Restore it from git (`git checkout -- PATH`) or make a new one with `batchperf refresh`"
               if what == "baseline" else "Re-run the cells to write a new results file (pytest --benchmark-json)")
        raise BaselineError(path, f"is not valid JSON ({exc}); the {what} file is corrupt or truncated",
                            fix.replace("PATH", str(path))) from None
    if not isinstance(data, dict) or not isinstance(data.get("benchmarks"), list):
        raise BaselineError(path, f"is not a pytest-benchmark JSON file (no 'benchmarks' list)",
                            "Pass a file written by `pytest --benchmark-json` or a baseline.json under baselines/")
    return data, hashlib.sha256(raw).hexdigest()


def _check_entries(path: Path, benchmarks: list[Any], what: str) -> dict[str, dict[str, Any]]:
    entries: dict[str, dict[str, Any]] = {}
    problems: list[str] = []
    for i, bench in enumerate(benchmarks):
        name = bench.get("fullname") if isinstance(bench, dict) else None
        info = bench.get("extra_info") if isinstance(bench, dict) else None
        if not name or not isinstance(info, dict):
            problems.append(f"benchmark #{i} has no fullname or extra_info")
            continue
        if "batchperf_schema" not in info:
            continue  # another plugin's benchmark in the same file
        missing = [f for f in REQUIRED_CELL_FIELDS if not isinstance(info.get(f), dict)]
        if missing:
            problems.append(f"{name}: extra_info lacks {', '.join(missing)}")
            continue
        schema = info.get("batchperf_schema")
        if schema != RESULTS_SCHEMA:
            problems.append(f"{name}: cell schema {schema!r}, this batchperf reads {RESULTS_SCHEMA}")
            continue
        entries[name] = bench
    if not entries and not problems:
        problems.append("no batchperf cell in it (no extra_info.batchperf_schema)")
    if problems:
        shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
        raise BaselineError(path, f"{len(problems)} {what} entr{'y' if len(problems) == 1 else 'ies'} unusable: {shown}",
                            "Re-run those cells with this batchperf (a file from another tool or version "
                            "cannot be compared), or drop them from the file")
    return entries


def load_results(path: Path) -> RunFile:
    """A results file written by ``pytest --benchmark-json`` with batchperf cells."""
    data, digest = _read_json(path, "results")
    entries = _check_entries(path, data["benchmarks"], "results")
    raw_fp = (data.get("machine_info") or {}).get("batchperf")
    fingerprint = None
    if raw_fp is not None:
        try:
            fingerprint = Fingerprint.from_dict(raw_fp)
        except ValueError as exc:
            raise BaselineError(path, f"machine_info.batchperf is not a fingerprint ({exc})",
                                "Re-run the cells with this batchperf") from None
    return RunFile(path, data, fingerprint, entries, digest, sources=((str(path), digest),))


def pool_runs(runs: list[RunFile]) -> RunFile:
    """Several runs of the same cells as one: every cell's rounds concatenated, its metrics the median over all.

    A baseline pooled from separate runs carries their run-to-run spread in ``rounds``,
    which the gate's k × spread tolerance then honours (A/A noise measured, not guessed).
    """
    if len(runs) == 1:
        return runs[0]
    first = runs[0]
    for run in runs[1:]:
        if first.fingerprint is None or run.fingerprint is None:
            continue
        diffs = identity_diff(first.fingerprint.identity.to_dict(), run.fingerprint.identity.to_dict())
        versions = version_diff(first.fingerprint.upgrade, run.fingerprint.upgrade)
        diffs += [f"{k}: {a} → {b}" for k, (a, b) in versions.items()]
        commits = [(r.data.get("commit_info") or {}).get("id") for r in (first, run)]
        if commits[0] != commits[1]:
            diffs.append(f"commit: {commits[0]} → {commits[1]}")
        if diffs:
            raise BaselineError(run.path, f"cannot be pooled with {first.path}: {'; '.join(diffs)}",
                                "Pool only runs of the same commit, versions and hardware")
    entries: dict[str, dict[str, Any]] = {}
    for run in runs:
        for name, bench in run.entries.items():
            if name not in entries:
                entries[name] = json.loads(json.dumps(bench))  # a deep copy we may change
                entries[name]["extra_info"]["pooled_runs"] = 1
                continue
            pooled, info = entries[name]["extra_info"], bench["extra_info"]
            if diff := identity_diff(cell_identity(pooled), cell_identity(info)):
                raise BaselineError(run.path, f"{name} differs from the other runs: {'; '.join(diff)}",
                                    "Pool only runs of the same cells")
            pooled["rounds"] = [*pooled.get("rounds", []), *info.get("rounds", [])]
            pooled["token_count_errors"] = [*pooled.get("token_count_errors", []), *info.get("token_count_errors", [])]
            pooled["pooled_runs"] += 1
    for bench in entries.values():
        info = bench["extra_info"]
        if info["pooled_runs"] > 1 and info.get("rounds"):
            info["metrics"] = summarise(info["rounds"])
    dirty = any((r.data.get("commit_info") or {}).get("dirty") for r in runs)
    data = {**first.data, "commit_info": {**(first.data.get("commit_info") or {}), "dirty": dirty},
            "benchmarks": list(entries.values())}
    sources = tuple(src for r in runs for src in r.sources)
    digest = hashlib.sha256("".join(sha for _, sha in sources).encode()).hexdigest()
    return RunFile(first.path, data, first.fingerprint, entries, digest, sources=sources)


def load_baseline(path: Path, expected: Fingerprint | None = None) -> RunFile:
    """A pinned baseline; ``expected`` (this machine) must have the same hardware identity."""
    data, digest = _read_json(path, "baseline")
    block = data.get("batchperf_baseline")
    if not isinstance(block, dict):
        raise BaselineError(path, "has no 'batchperf_baseline' block: it is a results file, not a baseline",
                            f"Make a baseline from it with `batchperf refresh {path} --reason ...`")
    if block.get("schema") != SCHEMA:
        raise BaselineError(path, f"has baseline schema {block.get('schema')!r}; this batchperf reads schema {SCHEMA}",
                            "Use the batchperf version that wrote it, or make a new baseline with `batchperf refresh`")
    try:
        fingerprint = Fingerprint.from_dict(block.get("fingerprint"))
    except ValueError as exc:
        raise BaselineError(path, f"its fingerprint is unreadable ({exc})",
                            "Restore it from git or make a new one with `batchperf refresh`") from None
    if expected is not None and fingerprint.key != expected.key:
        raise BaselineError(
            path, f"was made on other hardware ({fingerprint.identity.describe()}, fingerprint {fingerprint.key}); "
            f"this machine is {expected.identity.describe()} ({expected.key})",
            f"Compare against the right file with --benchmark-compare=PATH, or make this machine's baseline with "
            f"`batchperf refresh` (it goes to {path.parent.parent / expected.key})")
    entries = _check_entries(path, data["benchmarks"], "baseline")
    return RunFile(path, data, fingerprint, entries, digest, dict(block.get("provenance") or {}))


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
            raise BaselineError(path, f"line {n} is not JSON", "Restore the file from git") from None
    return out


# --- writing --------------------------------------------------------------------------------------


class LockHeld(BaselineError):
    pass


@contextlib.contextmanager
def locked(folder: Path) -> Iterator[None]:
    """Exclusive, non-blocking lock on ``folder``; released by the OS even if the holder dies."""
    import fcntl

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOCK_FILE
    with open(path, "a+", encoding="utf-8") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip() or "unknown"
            raise LockHeld(path, f"another baseline refresh holds the lock ({holder})",
                           "Wait for it to finish and run again; nothing was written") from None
        fh.seek(0)
        fh.truncate()
        fh.write(f"pid {os.getpid()}")
        fh.flush()
        try:
            yield
        finally:
            fh.seek(0)
            fh.truncate()
            fcntl.flock(fh, fcntl.LOCK_UN)


def stale_temporaries(folder: Path) -> list[Path]:
    """Temporary files an interrupted refresh left behind (only meaningful while holding the lock)."""
    return sorted(folder.glob(f".{BASELINE_FILE}.*.tmp"))


def atomic_write_text(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # a file to commit, not mkstemp's private 0600
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def append_history(folder: Path, provenance: dict[str, Any]) -> None:
    path = folder / HISTORY_FILE
    if path.exists() and path.stat().st_size > 0:
        raw = path.read_bytes()
        if not raw.endswith(b"\n"):  # a crash cut the last append: drop the fragment (repair_history restores it)
            os.truncate(path, raw.rfind(b"\n") + 1)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(provenance, sort_keys=True) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def baseline_entry(bench: dict[str, Any]) -> dict[str, Any]:
    """A results benchmark entry as stored in a baseline: everything but the raw traces."""
    info = {k: v for k, v in bench["extra_info"].items() if k not in DROPPED_FIELDS}
    return {**bench, "extra_info": info}


def write_baseline(folder: Path, template: dict[str, Any], entries: list[dict[str, Any]],
                   fingerprint: Fingerprint, provenance: dict[str, Any]) -> Path:
    """Write ``folder/baseline.json`` atomically, then append ``provenance`` to the history. Hold :func:`locked`."""
    data = {
        **{k: v for k, v in template.items() if k != "benchmarks"},
        "benchmarks": sorted(entries, key=lambda b: b["fullname"]),
        "batchperf_baseline": {"schema": SCHEMA, "fingerprint": fingerprint.to_dict(), "provenance": provenance},
    }
    path = folder / BASELINE_FILE
    atomic_write_text(path, json.dumps(data, indent=1, sort_keys=True) + "\n")
    # A crash right here leaves the history one entry short; repair_history() restores it from the baseline.
    append_history(folder, provenance)
    return path


def repair_history(folder: Path) -> dict[str, Any] | None:
    """Append the current baseline's provenance if a crash kept it out of the history; returns what was added."""
    path = folder / BASELINE_FILE
    if not path.exists():
        return None
    try:
        provenance = json.loads(path.read_text(encoding="utf-8"))["batchperf_baseline"]["provenance"]
    except (ValueError, KeyError, TypeError):
        return None
    ids = {h.get("id") for h in read_history(folder)}
    if provenance.get("id") and provenance["id"] not in ids:
        recovered = {**provenance, "recovered": "appended after an interrupted refresh"}
        append_history(folder, recovered)
        return recovered
    return None
