"""``batchperf merge``: join per-shard results JSON files into one results file.

Each shard (``--batchperf-shard=I/N``) writes its own pytest-benchmark JSON.
The merged file is an ordinary pytest-benchmark file, so ``batchperf compare``,
``report``, ``refresh`` and ``pytest-benchmark compare`` read it like a
single run. Shards only merge when they measured the same thing on the same
kind of machine with the same software: the same batchperf fingerprint (its
hardware key and upgrade axes) or, in files without one, the same machine,
processor and Python, and the same commit. A cell present in two shards is
refused rather than silently picked.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path
from typing import Any


class MergeError(ValueError):
    """Shards that must not be joined; the message names the files and the field."""


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise MergeError(f"{path}: no such results file") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise MergeError(f"{path}: not valid JSON ({exc}); the shard's file is corrupt or truncated — re-run it") from None
    if not isinstance(data, dict) or not isinstance(data.get("benchmarks"), list):
        raise MergeError(f"{path}: no 'benchmarks' list; this is not a pytest-benchmark results file")
    return data


def machine_key(data: dict[str, Any]) -> dict[str, Any]:
    """What must agree between shards: the fingerprint's identity and versions, else the basic machine facts."""
    info = data.get("machine_info") or {}
    fingerprint = info.get("batchperf")
    if isinstance(fingerprint, dict) and "key" in fingerprint:
        return {"fingerprint": fingerprint["key"], "versions": fingerprint.get("upgrade", {})}
    return {k: info.get(k) for k in ("machine", "processor", "python_implementation", "python_version")}


def _cell_key(bench: dict[str, Any]) -> str:
    cell = (bench.get("extra_info") or {}).get("cell")
    return cell["id"] if isinstance(cell, dict) and "id" in cell else str(bench.get("fullname") or bench.get("name"))


def _differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    return [f"{k}: {a.get(k)!r} vs {b.get(k)!r}" for k in sorted(a.keys() | b.keys()) if a.get(k) != b.get(k)]


def merge_results(paths: list[Path]) -> dict[str, Any]:
    """The union of the shards' benchmarks under the first shard's machine and commit info."""
    if not paths:
        raise MergeError("no results files given; pass the shards' JSON files")
    files = [(p, _read(p)) for p in paths]
    first_path, first = files[0]
    seen: dict[str, Path] = {}
    benchmarks: list[dict[str, Any]] = []
    shards: list[dict[str, Any]] = []
    for path, data in files:
        if diff := _differences(machine_key(first), machine_key(data)):
            raise MergeError(f"{path} was measured on another machine or software than {first_path} "
                             f"({'; '.join(diff)}); merge only shards of one run on one kind of hardware")
        commit_a, commit_b = (first.get("commit_info") or {}).get("id"), (data.get("commit_info") or {}).get("id")
        if commit_a != commit_b:
            raise MergeError(f"{path} is from commit {commit_b}, {first_path} from {commit_a}; "
                             f"merge only shards of one run")
        for bench in data["benchmarks"]:
            key = _cell_key(bench)
            if key in seen:
                raise MergeError(f"cell {key} is in both {seen[key]} and {path}; each cell must be in exactly one "
                                 f"shard (same --batchperf-shard twice, or a file passed twice?)")
            seen[key] = path
            benchmarks.append(bench)
        shards.append({"file": path.name, "node": (data.get("machine_info") or {}).get("node"),
                       "datetime": data.get("datetime"), "benchmarks": len(data["benchmarks"])})
    merged = {k: v for k, v in first.items() if k != "benchmarks"}
    merged["machine_info"] = {**(first.get("machine_info") or {}), "batchperf_shards": shards}
    # The run is complete when its last shard is: that time orders it in the history.
    stamps = [d.get("datetime") for _, d in files if d.get("datetime")]
    if stamps:
        merged["datetime"] = max(stamps)
    merged["benchmarks"] = sorted(benchmarks, key=lambda b: str(b.get("fullname") or b.get("name")))
    return merged


def write_atomic(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh, indent=4)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("shards", nargs="+", type=Path, metavar="SHARD.json", help="per-shard results files")
    parser.add_argument("--out", type=Path, required=True, help="merged results JSON to write")


def main(args: argparse.Namespace) -> int:
    try:
        merged = merge_results(list(args.shards))
    except MergeError as exc:
        raise SystemExit(f"batchperf merge: {exc}") from None
    write_atomic(args.out, merged)
    print(f"batchperf merge: {len(merged['benchmarks'])} cells from {len(args.shards)} shard(s) -> {args.out}")
    return 0
