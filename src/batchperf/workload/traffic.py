"""Workload kinds beyond the synthetic one: shared prefixes, trace replay, tenants (:mod:`.tenants`).

A cell's ``--batchperf-workloads`` entry is parsed by :func:`parse_workload` into a *kind* with a
``build(vocab_size, max_model_len)`` that returns a :class:`~batchperf.workload.spec.Workload`:

- ``synthetic``: today's workload (:class:`~batchperf.workload.spec.WorkloadSpec`), unchanged.
- ``prefix:GROUPS:PREFIX_LEN``: GROUPS system prompts of PREFIX_LEN tokens; request i is prompt
  ``i % GROUPS`` followed by a distinct suffix of the cell's prompt length. With a cold cache the
  first request of each group computes its prefix and every later one can reuse it, so the expected
  prefix-cache hit rate is ``(N - GROUPS) x PREFIX_LEN / (total prompt tokens)`` (token-granular: an
  engine caches whole blocks, so choose PREFIX_LEN a multiple of its block size, 128 for vLLM on CPU,
  16 on GPU and in batchperf's engine).
- ``trace:PATH[:speed=X][:window=A-B][:block=N]``: replay a trace file (:mod:`.replay`) at its
  timestamps, open loop; ``speed`` 2 sends twice as fast, ``window`` keeps the requests with a
  timestamp in [A, B) seconds (rebased to 0), ``block`` the tokens per ``hash_ids`` id (default 512).
  Equal ``hash_ids`` give equal token blocks (seeded), different ids different ones. Only the
  window's requests are kept in memory.
- ``tenants:PATH``: a tenants file, see :mod:`batchperf.workload.tenants`.

The load factor (``--batchperf-load``) scales offered load: a trace is sent ``load`` times faster, a
tenant's rate and a ``rate:`` arrival are multiplied by it; a closed-loop cell has no offered load
to scale and refuses a factor other than 1.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from batchperf.workload.replay import (
    MAX_TIMESTAMP_S,
    MAX_TOKENS,
    MOONCAKE_BLOCK_SIZE,
    TraceRow,
    exact,
    file_hash,
    read_trace,
)
from batchperf.workload.spec import (
    MAX_SCHEDULE_S,
    Arrival,
    LengthSpec,
    RequestSpec,
    Workload,
    WorkloadSpec,
    schedule_length,
)
from batchperf.workload.synth import TokenSynth, check_fits, check_memory, file_stem
from batchperf.workload.tenants import TenantsKind

KINDS = ("synthetic", "prefix", "trace", "tenants")


def parse_load(text: str) -> float:
    """A load factor: a positive finite number."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"invalid load factor {text!r}: must be a finite number > 0 (1 = the workload as written)")
    return value


def number_text(value: float) -> str:
    """One spelling per number, for cell ids: ``1.0``, ``01`` and ``1_0``-free ``1`` all read 1 -> ``1``; 2.5 -> ``2.5``."""
    text = repr(float(value))
    return text[:-2] if text.endswith(".0") else text


@dataclass(frozen=True, slots=True)
class SyntheticKind:
    base: WorkloadSpec
    load: float = 1.0
    kind = "synthetic"
    text = "synthetic"

    @property
    def label(self) -> str:
        return "synthetic"

    def build(self, vocab_size: int, max_model_len: int, first_token_id: int = 0) -> Workload:
        spec = self.base
        if self.load != 1.0:
            spec = replace(spec, arrival=scaled_arrival(spec.arrival, self.load))
        return replace(spec.build(vocab_size, max_model_len, first_token_id), load=self.load)


def scaled_arrival(arrival: Arrival, load: float) -> Arrival:
    if arrival.kind != "rate":
        raise ValueError(f"load factor {load:g}: a {arrival.kind} arrival has no offered load to scale; "
                         f"use --batchperf-arrival rate:R, a trace or a tenants workload, or load 1")
    return replace(arrival, rate=arrival.rate * load)


@dataclass(frozen=True, slots=True)
class PrefixKind:
    base: WorkloadSpec
    groups: int
    prefix_len: int
    text: str
    load: float = 1.0
    kind = "prefix"

    @property
    def label(self) -> str:
        return f"prefix{self.groups}x{self.prefix_len}"

    def build(self, vocab_size: int, max_model_len: int, first_token_id: int = 0) -> Workload:
        spec = self.base
        arrival = spec.arrival if self.load == 1.0 else scaled_arrival(spec.arrival, self.load)
        check_fits(self.prefix_len + spec.prompt_len.high, max(spec.output_lens), max_model_len, self.text)
        synth = TokenSynth(spec.seed, vocab_size, first_token_id)
        rng = np.random.Generator(np.random.PCG64(spec.seed))
        n, cycle = spec.num_prompts, spec.output_lens
        suffix_lens = spec.prompt_len.draw(rng, n)
        prefixes = [synth.tokens(3, g, self.prefix_len) for g in range(self.groups)]
        offsets = arrival.offsets(rng, n)
        requests = tuple(RequestSpec(i, prefixes[i % self.groups] + synth.tokens(4, i, suffix_lens[i]),
                                     cycle[i % len(cycle)], offsets[i]) for i in range(n))
        # warm-up: distinct prompts of the same lengths, sharing nothing with the measured ones
        warm = tuple(RequestSpec(-(i + 1), synth.tokens(5, i, self.prefix_len + suffix_lens[i % n]),
                                 cycle[i % len(cycle)]) for i in range(spec.num_warmup))
        reused = (n - min(self.groups, n)) * self.prefix_len
        expected = reused / sum(r.prompt_len for r in requests)
        return Workload(spec=replace(spec, arrival=arrival), requests=requests, warmup=warm, kind=self.kind,
                        label=self.label, load=self.load, expected_prefix_hit_rate=expected)


@dataclass(frozen=True, slots=True)
class TraceKind:
    base: WorkloadSpec
    path: Path
    text: str
    speed: float = 1.0
    window: tuple[float, float] = (0.0, math.inf)
    block_size: int = MOONCAKE_BLOCK_SIZE
    load: float = 1.0
    kind = "trace"

    @property
    def file_hash(self) -> str:
        return file_hash(self.path)

    @property
    def label(self) -> str:
        """Kind, the file's own name (a link's target: one file, one label) and hash, and the options given: two
        entries that replay the file differently are two cells."""
        options = "".join((f"-speed{number_text(self.speed)}" if self.speed != 1.0 else "",
                           f"-window{number_text(self.window[0])}to{number_text(self.window[1])}"
                           if self.window != (0.0, math.inf) else "",
                           f"-block{self.block_size}" if self.block_size != MOONCAKE_BLOCK_SIZE else ""))
        return f"trace-{file_stem(self.path.resolve())}-{self.file_hash[:8]}{options}"

    def rows(self) -> list[TraceRow]:
        """The window's rows (the file is streamed; only these are kept, at most what memory holds)."""
        low, high = self.window
        rows: list[TraceRow] = []
        tokens = 0
        for row in read_trace(self.path, self.block_size):
            if row.timestamp_s >= high:
                break  # in order: nothing later can be inside
            if row.timestamp_s >= low:
                rows.append(row)
                tokens += row.input_length
                check_memory(len(rows), tokens, f"{self.path} line {row.line}")
        if not rows:
            where = "" if self.window == (0.0, math.inf) else f" in window {low:g}-{high:g} s"
            raise ValueError(f"{self.text}: the trace has no requests{where}; nothing to replay")
        return rows

    def build(self, vocab_size: int, max_model_len: int, first_token_id: int = 0) -> Workload:
        rows = self.rows()
        synth = TokenSynth(self.base.seed, vocab_size, first_token_id, self.block_size)
        for row in rows:
            check_fits(row.input_length, row.output_length, max_model_len, f"{self.path} line {row.line}")
        start, pace = rows[0].timestamp_s if self.window[0] == 0.0 else self.window[0], self.speed * self.load
        if not pace > 0:  # speed 1e-200 x load 1e-200 is 0 in a float: every gap would be a division by 0
            raise ValueError(f"{self.text} at load {self.load:g}: speed x load = {self.speed:g} x {self.load:g} is "
                             f"below what a float holds; the schedule would be {schedule_length(math.inf)} long, "
                             f"beyond a cell's time limit of {MAX_SCHEDULE_S / 3600:g} h")
        requests = tuple(RequestSpec(i, synth.prompt(r), r.output_length, (r.timestamp_s - start) / pace,
                                     tenant=r.tenant, priority=r.priority) for i, r in enumerate(rows))
        warm = tuple(RequestSpec(-(i + 1), synth.tokens(5, i, rows[i % len(rows)].input_length),
                                 rows[i % len(rows)].output_length)
                     for i in range(WorkloadSpec.default_warmup(len(rows))))
        return Workload(spec=self.base, requests=requests, warmup=warm, kind=self.kind, label=self.label,
                        load=self.load, file_hash=self.file_hash, unlimited=True,
                        expected_prefix_hit_rate=expected_hit_rate(rows, self.block_size))


def expected_hit_rate(rows: list[TraceRow], block_size: int) -> float | None:
    """Tokens of whole blocks whose id chain was seen before (an unbounded cache) / prompt tokens; None without ids."""
    if not any(r.hash_ids for r in rows):
        return None
    seen: set[tuple[int, ...]] = set()
    hits = 0
    for r in rows:
        ids = r.hash_ids or ()
        for k in range(1, len(ids) + 1):
            chain = ids[:k]
            if chain in seen and k * block_size < r.input_length:  # vLLM computes a prompt's last token anew
                hits += block_size
            seen.add(chain)
    return hits / sum(r.input_length for r in rows)


_LABEL_BASE = WorkloadSpec(1, LengthSpec(1, 1))


def workload_label(text: str) -> str:
    """The label of a ``--batchperf-workloads`` entry for a cell id (kind and file hash); a bad entry gives its
    own text, cleaned (the cell then fails with the reason when it is resolved)."""
    try:
        return parse_workload(text, _LABEL_BASE).label
    except ValueError:
        return re.sub(r"[^A-Za-z0-9.=-]+", "_", text.strip())


def _options(parts: list[str], allowed: tuple[str, ...], text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in parts:
        key, sep, value = part.partition("=")
        if not sep or key not in allowed:
            if not allowed:
                raise ValueError(f"bad workload {text!r}: option {part!r}; this kind takes no options")
            raise ValueError(f"bad workload {text!r}: option {part!r}; use {', '.join(k + '=…' for k in allowed)}")
        if key in out:  # the last would silently win
            raise ValueError(f"bad workload {text!r}: option {key} given twice ({key}={out[key]} and {part}); "
                             f"give it once")
        out[key] = value
    return out


def _float(raw: str) -> float:
    """``raw`` as a float; NaN (refused by every check below) when it is no number."""
    try:
        return float(raw)
    except ValueError:
        return math.nan


def _seconds(name: str, raw: str, text: str) -> float:
    """A number of seconds from the trace start: >= 0 and within a century."""
    value = _float(raw)
    if not 0 <= value <= MAX_TIMESTAMP_S:  # NaN too
        raise ValueError(f"bad workload {text!r}: {name} {raw!r} must be a number of seconds from 0 to "
                         f"{exact(MAX_TIMESTAMP_S)} (a timestamp within a century of the trace start)")
    return value


def _positive(name: str, raw: str, text: str) -> float:
    value = _float(raw)
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"bad workload {text!r}: {name} {raw!r} must be a finite number > 0")
    return value


def _window(raw: str, text: str) -> tuple[float, float]:
    start, sep, end = raw.partition("-")
    if not sep:
        raise ValueError(f"bad workload {text!r}: window={raw} must be A-B seconds from the trace start, e.g. "
                         f"window=2-5, with A < B")
    low, high = _seconds("window start", start, text), _seconds("window end", end, text)
    if not low < high:
        raise ValueError(f"bad workload {text!r}: window={raw} must be A-B seconds with A < B (it is empty)")
    return low, high


def _block(raw: str, text: str) -> int:
    if not re.fullmatch(r"[0-9]+", raw) or not 1 <= int(raw) <= MAX_TOKENS:
        raise ValueError(f"bad workload {text!r}: block={raw} must be a whole number of tokens from 1 to "
                         f"{MAX_TOKENS:,} (the tokens per hash id, within any model's context)")
    return int(raw)


WorkloadKind = SyntheticKind | PrefixKind | TraceKind | TenantsKind  # each has kind, label, load, build(...)


def parse_workload(text: str, base: WorkloadSpec, load: float = 1.0, root: Path | None = None) -> WorkloadKind:
    """The kind named by a ``--batchperf-workloads`` entry; ValueError names the entry and the fix."""
    raw = text.strip()
    kind, _, rest = raw.partition(":")
    if kind == "synthetic" and not rest:
        return SyntheticKind(base, load)
    if kind == "prefix":
        m = re.fullmatch(r"(\d+):(\d+)", rest)
        if not m or int(m[1]) < 1 or int(m[2]) < 1:
            raise ValueError(f"bad workload {raw!r}: use prefix:GROUPS:PREFIX_LEN, both whole numbers >= 1")
        return PrefixKind(base, int(m[1]), int(m[2]), raw, load)
    if kind in ("trace", "tenants"):
        path_text, *opts = rest.split(":")
        if not path_text:
            raise ValueError(f"bad workload {raw!r}: name the file, {kind}:PATH")
        path = Path(path_text) if root is None or Path(path_text).is_absolute() else root / path_text
        if not path.is_file():
            raise ValueError(f"bad workload {raw!r}: no file {path}")
        if kind == "tenants":
            _options(opts, (), raw)
            return TenantsKind(base, path, raw, load)
        o = _options(opts, ("speed", "window", "block"), raw)
        window = _window(o["window"], raw) if "window" in o else (0.0, math.inf)
        block = _block(o["block"], raw) if "block" in o else MOONCAKE_BLOCK_SIZE
        return TraceKind(base, path, raw, _positive("speed", o.get("speed", "1"), raw), window, block, load)
    raise ValueError(f"unknown workload {raw!r}: use synthetic, prefix:GROUPS:PREFIX_LEN, "
                     f"trace:PATH[:speed=X][:window=A-B][:block=N] or tenants:PATH")


NO_SHARED_PREFIX = "the workload shares no prefixes: no hit rate to measure (see workload.expected_prefix_hit_rate)"


def shared_prefix_counters(counters: dict[str, object], workload: dict[str, object]) -> dict[str, object]:
    """A cell's counters with the prefix-cache hit rate kept only where the workload shares prefixes (elsewhere an
    engine's 0 would be a baseline the gate cannot judge a relative change from), and absent with the reason."""
    if "prefix_cache_hit_rate" not in counters or workload.get("expected_prefix_hit_rate") is not None:
        return counters
    absent = {**counters.get("absent", {}), "prefix_cache_hit_rate": NO_SHARED_PREFIX}  # type: ignore[dict-item]
    return {**{k: v for k, v in counters.items() if k != "prefix_cache_hit_rate"}, "absent": absent}


def describe_workload(workload: Workload, spec: str, priority_honoured: bool, priority_note: str,
                      prefix_caching: bool | None) -> dict[str, object]:
    """A cell record's ``workload`` section (docs/traffic.md lists its keys)."""
    tenants = sorted({r.tenant for r in workload.requests if r.tenant is not None})
    return {
        "kind": workload.kind, "label": workload.label, "spec": spec.strip(), "load": workload.load,
        "file_hash": workload.file_hash, "open_loop": workload.open_loop,
        **({} if workload.expected_prefix_hit_rate is None
           else {"expected_prefix_hit_rate": workload.expected_prefix_hit_rate}),
        "slos": {name: {"ttft_ms": s.ttft_ms, "tpot_ms": s.tpot_ms, "e2el_ms": s.e2el_ms}
                 for name, s in workload.slos.items()},
        "tenants": tenants,
        "priority": "honoured" if priority_honoured else "ignored",
        "priority_note": priority_note,
        "prefix_caching": prefix_caching,
    }
