"""Join per-shard results files into one results file (``batchperf merge``).

Each shard (``--batchperf-shard=I/N``) writes its own pytest-benchmark JSON.
The merged file is an ordinary pytest-benchmark file, so ``batchperf compare``,
``report``, ``refresh`` and ``pytest-benchmark compare`` read it like a
single run. Shards only merge when they measured the same thing on the same
kind of machine with the same software: the same batchperf fingerprint (its
hardware key and upgrade axes) or, in files without one, the same machine,
processor and Python, and the same commit. Torch's thread count is part of
the fingerprint's identity, so shards measured with different thread counts
never merge. A cell present in two shards is
refused rather than silently picked.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from batchperf.results.io import INCOMPLETE_KEY, ResultsFile, read_results, write_results
from batchperf.results.record import ResultsError

FIX = "merge only the shards of one run, on one kind of hardware, with the same software"


def machine_key(results: ResultsFile) -> dict[str, Any]:
    """What must agree between shards: the fingerprint's whole identity and versions, else the basic machine facts."""
    fingerprint = results.fingerprint
    if isinstance(fingerprint, dict) and "identity" in fingerprint:
        return {"identity": fingerprint["identity"], "versions": fingerprint.get("upgrade", {})}
    info = results.machine_info
    return {k: info.get(k) for k in ("machine", "processor", "python_implementation", "python_version")}


def _differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    return [f"{k}: {a.get(k)!r} vs {b.get(k)!r}" for k in sorted(a.keys() | b.keys()) if a.get(k) != b.get(k)]


def merge_results(paths: list[Path]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The union of the shards' cells (header, benchmarks) under the first shard's machine and commit info."""
    if not paths:
        raise ResultsError("batchperf merge", "no results files given", "Pass the shards' JSON files")
    files = [read_results(p) for p in paths]
    first = files[0]
    seen: dict[str, Path] = {}
    entries: list[dict[str, Any]] = []
    shards: list[dict[str, Any]] = []
    for results in files:
        if diff := _differences(machine_key(first), machine_key(results)):
            raise ResultsError(results.path, f"was measured on another machine or software than {first.path} "
                               f"({'; '.join(diff)})", FIX)
        commit_a, commit_b = first.commit_info.get("id"), results.commit_info.get("id")
        if commit_a != commit_b:
            raise ResultsError(results.path, f"is from commit {commit_b}, {first.path} from {commit_a}", FIX)
        for name, rec in results.cells.items():
            if rec.id in seen:
                raise ResultsError(results.path, f"cell {rec.id} is also in {seen[rec.id]}", "Each cell must be in "
                                   "exactly one shard (same --batchperf-shard twice, or a file passed twice?)")
            seen[rec.id] = results.path
            entries.append(results.entry(name))
        entries.extend(results.others)
        shards.append({"file": results.path.name, "node": results.machine_info.get("node"),
                       "datetime": results.datetime or None, "benchmarks": len(results.cells) + len(results.others)})
    header = {**first.header, "machine_info": {**first.machine_info, "batchperf_shards": shards}}
    header.pop(INCOMPLETE_KEY, None)
    if incomplete := [f"{f.path.name}: {why}" for f in files if (why := f.incomplete)]:  # one cut shard: a cut run
        header[INCOMPLETE_KEY] = {"reason": "; ".join(incomplete)}
    # The run is complete when its last shard is: that time orders it in the history.
    if stamps := [f.datetime for f in files if f.datetime]:
        header["datetime"] = max(stamps)
    return header, entries


def merge_files(paths: list[Path], out: Path) -> int:
    """Merge ``paths`` into ``out`` (atomically); returns the number of benchmarks written."""
    header, entries = merge_results(paths)
    write_results(out, header, entries)
    return len(entries)
