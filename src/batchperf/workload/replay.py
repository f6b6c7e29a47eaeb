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

Every row is checked as it is read, and the error names the line and the field. Every number is bounded (a
timestamp within a century, a length within any model's context, a hash id and a priority within 64 and 32
bits), so nothing a reader accepts can overflow later. Timestamps must not go
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
# Bounds of what a trace may hold, each said in its error. No model's context is near 2**24 tokens (the cell
# checks the model's own when it starts); a century of timestamps outlasts any trace; ids and priorities are
# what vLLM's and Mooncake's integers hold.
MAX_TOKENS = 1 << 24
MAX_TIMESTAMP_S = 100 * 365.25 * 86400.0
MAX_HASH_ID = 1 << 63
MAX_PRIORITY = 1 << 31
FLOAT_INT = 1 << 1023  # integers beyond this are no float
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
    with open(path, "rb") as fh:
        lines = decoded(fh, str(path))
        yield from read_csv(lines, str(path)) if path.suffix == ".csv" else read_jsonl(lines, str(path), block_size)


def decoded(lines: Iterable[bytes], where: str) -> Iterator[str]:
    """UTF-8 text of each line, a byte-order mark at the start dropped (a spreadsheet's CSV has one, and it would
    otherwise hide the first column's name); bytes that are not UTF-8 are refused with their line and column."""
    for number, raw in enumerate(lines, 1):
        try:
            yield raw.decode("utf-8-sig" if number == 1 else "utf-8")
        except UnicodeDecodeError as exc:
            raise TraceError(f"{where} line {number}: byte {raw[exc.start]:#04x} at column {exc.start + 1} is not "
                             f"UTF-8; a trace is UTF-8 text (convert it, e.g. `iconv -t UTF-8`)") from None


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
        except RecursionError:  # Python's JSON parser recurses: [[[...]]] ~1000 deep ends it
            raise TraceError(f"{at}: nested too deep to be a trace line (hash_ids is a flat list of ids)") from None
        except ValueError as exc:  # an integer past Python's digit limit (thousands of digits)
            raise TraceError(f"{at}: a number too long to read ({exc}); no trace field has thousands of digits") from None
        if not isinstance(data, dict):
            raise TraceError(f"{at}: a line must be a JSON object, got {type(data).__name__}")
        if unknown := sorted(set(data) - JSONL_FIELDS):
            raise TraceError(f"{at}: unknown field(s) {', '.join(unknown)}; a line has {', '.join(sorted(JSONL_FIELDS))}")
        for key in ("timestamp", "input_length", "output_length"):
            if key not in data:
                raise TraceError(f"{at}: field {key} is missing")
        row = TraceRow(number, _time(data["timestamp"], 1e3, at, "timestamp"),
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
        parsed = TraceRow(number, _time(_number(row["Timestamp"], at, "Timestamp"), 1.0, at, "Timestamp"),
                          _length(_number(row["Request tokens"], at, "Request tokens"), at, "Request tokens"),
                          _length(_number(row["Response tokens"], at, "Response tokens"), at, "Response tokens"))
        last = _in_order(parsed, last, at)
        yield parsed


def _number(text: str | None, at: str, name: str) -> float:
    try:
        return float(text or "")
    except ValueError:
        raise TraceError(f"{at}: field {name} is {text!r}, not a number") from None


def shown(value: object) -> str:
    """``value`` for an error message, a 400-digit number cut short."""
    text = repr(value) if not (isinstance(value, int) and abs(value) > 10**30) else f"a {len(str(abs(value)))}-digit number"
    return text if len(text) <= 60 else text[:57] + "..."


def exact(limit: float) -> str:
    """A bound for an error message, as it is: ``2,147,483,647``, ``0.001`` (``%g`` rounds 2**31 - 1 to
    2.14748e+09, a limit no one can check a value against)."""
    return f"{int(limit):,}" if float(limit).is_integer() else repr(float(limit))


def real(value: object) -> bool:
    """A JSON number (not true/false) that a float holds: a 400-digit integer would overflow math.isfinite."""
    if type(value) is float:
        return math.isfinite(value)
    return type(value) is int and -FLOAT_INT < value < FLOAT_INT


def _time(value: object, per_s: float, at: str, name: str) -> float:
    """A timestamp in seconds (``per_s``: units of the field per second), within a century of the trace start."""
    if not real(value) or not 0 <= value / per_s <= MAX_TIMESTAMP_S:  # type: ignore[operator]
        raise TraceError(f"{at}: field {name} is {shown(value)}; it must be a number from 0 to "
                         f"{exact(MAX_TIMESTAMP_S * per_s)} ({'ms' if per_s > 1 else 's'}): a timestamp within a "
                         f"century of the trace start")
    return float(value) / per_s  # type: ignore[arg-type]


def _length(value: object, at: str, name: str) -> int:
    if not real(value) or value != int(value) or not 1 <= value <= MAX_TOKENS:  # type: ignore[arg-type,operator]
        raise TraceError(f"{at}: field {name} is {shown(value)}; a length must be a whole number of tokens >= 1 "
                         f"and at most {MAX_TOKENS:,} (a length within any model's context)")
    return int(value)  # type: ignore[call-overload]


def _hash_ids(value: object, at: str, input_length: int, block_size: int) -> tuple[int, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise TraceError(f"{at}: field hash_ids must be a list of whole numbers, got {shown(value)}")
    if bad := [v for v in value if not -MAX_HASH_ID <= v < MAX_HASH_ID]:
        raise TraceError(f"{at}: field hash_ids holds {shown(bad[0])}; an id must be within 64 bits "
                         f"(|id| < 2**63)")
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
        raise TraceError(f"{at}: field tenant is {shown(value)}, not a name")
    if problem := name_problem(value):
        raise TraceError(f"{at}: field tenant {shown(value)} {problem}")
    return value


def name_problem(name: str) -> str | None:
    """Why a tenant's name cannot be written to a results file and read back by every reader, or None: a lone
    surrogate (legal in JSON, ``"\\ud800"``) is no text that UTF-8 or a plot can hold."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return "holds a lone surrogate (a half of a UTF-16 pair), which is no character; name it in plain text"
    return None


def _priority(value: object, at: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not -MAX_PRIORITY <= value < MAX_PRIORITY:
        raise TraceError(f"{at}: field priority is {shown(value)}, not a whole number within 32 bits "
                         f"(from {exact(-MAX_PRIORITY)} to {exact(MAX_PRIORITY - 1)}; lower is served first)")
    return value


def _in_order(row: TraceRow, last: float, at: str) -> float:
    if row.timestamp_s < last:
        raise TraceError(f"{at}: timestamp {row.timestamp_s * 1e3:g} ms is before the previous line's "
                         f"{last * 1e3:g} ms; traces are replayed in order and out-of-order lines are refused "
                         f"(sort the file by timestamp first)")
    return row.timestamp_s
