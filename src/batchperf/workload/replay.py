"""Reading a request trace, one line at a time: Mooncake-style JSONL or BurstGPT CSV.

JSONL (the Mooncake trace format that AIPerf replays), one request a line::

    {"timestamp": 0, "input_length": 600, "output_length": 20, "hash_ids": [0, 1], "tenant": "a", "priority": 0}

``timestamp`` is ms from the trace start; ``hash_ids`` (optional) name the prompt's blocks of
``block_size`` tokens (512, Mooncake's and AIPerf's default): a prompt of ``input_length`` tokens needs
exactly ceil(input_length / block_size) ids, and two requests that share a leading run of ids share
that prefix. ``tenant`` and ``priority`` are optional. Any other field is refused (a typo would
otherwise be silently ignored).

CSV with BurstGPT's columns (``Timestamp`` in s from the trace start, ``Request tokens``,
``Response tokens``; the other columns are ignored).

Every row is checked as it is read, and the error names the line and the field. Timestamps must not go
back: a trace out of order is refused (sorting would need the whole file in memory; sort it first with
``sort -n`` on the timestamp). Nothing is kept but the current row, so a million-line trace is read in
constant memory; :func:`file_hash` hashes the file in chunks.
"""

from __future__ import annotations

import csv
import functools
import hashlib
import json
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

MOONCAKE_BLOCK_SIZE = 512  # tokens per hash id, as in Mooncake's traces and AIPerf's default
JSONL_FIELDS = {"timestamp", "input_length", "output_length", "hash_ids", "tenant", "priority"}
BURSTGPT_COLUMNS = ("Timestamp", "Request tokens", "Response tokens")


class TraceError(ValueError):
    """A trace that cannot be replayed; the message names the file, the line and the field."""


@dataclass(frozen=True, slots=True)
class TraceRow:
    line: int  # 1-based line number in the file
    timestamp_s: float  # from the trace start
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...] | None = None
    tenant: str | None = None
    priority: int = 0


def file_hash(path: Path) -> str:
    """sha256 of the file's bytes (hex, first 16 digits), read in 1 MiB chunks; cached while the file is unchanged."""
    stat = path.stat()
    return _hash(str(path.resolve()), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=64)
def _hash(path: str, mtime_ns: int, size: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()[:16]


def read_trace(path: Path, block_size: int = MOONCAKE_BLOCK_SIZE) -> Iterator[TraceRow]:
    """The rows of the trace at ``path`` (``.csv``: BurstGPT columns; anything else: JSONL), streamed."""
    if not path.is_file():
        raise TraceError(f"trace {path}: no such file")
    with open(path, newline="" if path.suffix == ".csv" else None, encoding="utf-8") as fh:
        rows = read_csv(fh, str(path)) if path.suffix == ".csv" else read_jsonl(fh, str(path), block_size)
        yield from rows


def read_jsonl(lines: Iterable[str], where: str = "trace", block_size: int = MOONCAKE_BLOCK_SIZE) -> Iterator[TraceRow]:
    """Rows of a JSONL trace from any iterable of lines (a file, a generator); blank lines are skipped."""
    last = -math.inf
    for number, text in enumerate(lines, 1):
        if not text.strip():
            continue
        at = f"{where} line {number}"
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise TraceError(f"{at}: not JSON ({exc.msg} at column {exc.colno})") from None
        if not isinstance(data, dict):
            raise TraceError(f"{at}: a line must be a JSON object, got {type(data).__name__}")
        if unknown := sorted(set(data) - JSONL_FIELDS):
            raise TraceError(f"{at}: unknown field(s) {', '.join(unknown)}; a line has {', '.join(sorted(JSONL_FIELDS))}")
        for key in ("timestamp", "input_length", "output_length"):
            if key not in data:
                raise TraceError(f"{at}: field {key} is missing")
        row = TraceRow(number, _time(data["timestamp"], at, "timestamp") / 1e3,
                       _length(data["input_length"], at, "input_length"),
                       _length(data["output_length"], at, "output_length"),
                       _hash_ids(data.get("hash_ids"), at, data["input_length"], block_size),
                       _tenant(data.get("tenant"), at), _priority(data.get("priority", 0), at))
        last = _in_order(row, last, at)
        yield row


def read_csv(lines: Iterable[str], where: str = "trace") -> Iterator[TraceRow]:
    """Rows of a BurstGPT CSV (Timestamp in s, Request tokens, Response tokens), streamed."""
    reader = csv.DictReader(lines)
    if reader.fieldnames is None:
        return
    if missing := [c for c in BURSTGPT_COLUMNS if c not in reader.fieldnames]:
        raise TraceError(f"{where} line 1: column(s) {', '.join(missing)} missing; BurstGPT's CSV has "
                         f"{', '.join(BURSTGPT_COLUMNS)}")
    last = -math.inf
    for row in reader:
        number = reader.line_num
        at = f"{where} line {number}"
        parsed = TraceRow(number, _time(_number(row["Timestamp"], at, "Timestamp"), at, "Timestamp"),
                          _length(_number(row["Request tokens"], at, "Request tokens"), at, "Request tokens"),
                          _length(_number(row["Response tokens"], at, "Response tokens"), at, "Response tokens"))
        last = _in_order(parsed, last, at)
        yield parsed


def _number(text: str | None, at: str, name: str) -> float:
    try:
        return float(text or "")
    except ValueError:
        raise TraceError(f"{at}: field {name} is {text!r}, not a number") from None


def _time(value: object, at: str, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise TraceError(f"{at}: field {name} is {value!r}; it must be a finite number >= 0 from the trace start")
    return float(value)


def _length(value: object, at: str, name: str) -> int:
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
            or value != int(value) or value < 1):
        raise TraceError(f"{at}: field {name} is {value!r}; a length must be a whole number of tokens >= 1")
    return int(value)


def _hash_ids(value: object, at: str, input_length: int, block_size: int) -> tuple[int, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise TraceError(f"{at}: field hash_ids must be a list of whole numbers, got {value!r}")
    need = math.ceil(input_length / block_size)
    if len(value) != need:
        raise TraceError(f"{at}: field hash_ids has {len(value)} id(s) but input_length {input_length} needs "
                         f"exactly {need} blocks of {block_size} tokens; fix the trace or give its block size "
                         f"(trace:PATH:block=N)")
    return tuple(value)


def _tenant(value: object, at: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise TraceError(f"{at}: field tenant is {value!r}, not a name")
    return value


def _priority(value: object, at: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TraceError(f"{at}: field priority is {value!r}, not a whole number (lower is served first)")
    return value


def _in_order(row: TraceRow, last: float, at: str) -> float:
    if row.timestamp_s < last:
        raise TraceError(f"{at}: timestamp {row.timestamp_s * 1e3:g} ms is before the previous line's "
                         f"{last * 1e3:g} ms; traces are replayed in order and out-of-order lines are refused "
                         f"(sort the file by timestamp first)")
    return row.timestamp_s
