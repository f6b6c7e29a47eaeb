"""Engine counters of a cell, in vLLM's metric names: what the engine did while the cell ran.

A backend that has a scheduler reports, for each run, how often it preempted,
its prefix-cache queries and hits, its peak KV-cache usage and peak running
and waiting requests, how many engine steps it took and how many tokens (and
requests) each step carried, and where the engine reports it, the time its
requests spent in prefill and in decode. A counter a backend cannot give is
*absent*, with the reason, never zero-filled.

One run gives a *round* dict (``RunTrace.counters``): the raw values below
(``RAW``), ``absent`` (counter name -> why) and ``source`` (where they came
from). :func:`round_counters` builds one and checks that the backend accounted
for every counter. :func:`summarise` turns a cell's rounds into the cell's
``counters`` (``CellRecord.counters``): counts are the mean per measured round
(so cells measured over different numbers of rounds compare), peaks the
highest of any round, ratios pooled over every round (sum / sum).

Names follow vLLM's Prometheus metrics (``vllm:num_preemptions``,
``vllm:kv_cache_usage_perc`` — a fraction in [0, 1] despite its name,
``vllm:iteration_tokens_total`` — whose count is the engine steps and whose
sum the tokens scheduled), so a cell reads like the server's own /metrics.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

ABSENT = "absent"  # counter name -> why it is absent
SOURCE = "source"  # where the values came from (the engine's scheduler, a server's /metrics, ...)


class Kind(str, Enum):
    COUNT = "count"  # events in a round: the cell keeps the mean per round
    PEAK = "peak"  # the highest value seen in a round: the cell keeps the highest of any round
    RATIO = "ratio"  # numerator / denominator, both raw counts: pooled over the rounds


@dataclass(frozen=True, slots=True)
class Counter:
    name: str  # the key in a cell's ``counters``
    kind: Kind
    unit: str  # "requests", "tokens", "steps", "ratio", "seconds"
    help: str
    vllm: str = ""  # the vLLM metric it mirrors ("" when vLLM has none)
    parts: tuple[str, str] | None = None  # RATIO: (numerator, denominator) raw keys

    @property
    def raw(self) -> tuple[str, ...]:
        """The raw keys of a round this counter is made of."""
        return self.parts if self.parts is not None else (self.name,)


COUNTERS: tuple[Counter, ...] = (
    Counter("num_preemptions", Kind.COUNT, "requests", "requests preempted (their KV freed, recomputed later)",
            "vllm:num_preemptions"),
    Counter("prefix_cache_queries", Kind.COUNT, "tokens", "prompt tokens looked up in the prefix cache",
            "vllm:prefix_cache_queries"),
    Counter("prefix_cache_hits", Kind.COUNT, "tokens", "prompt tokens found in the prefix cache",
            "vllm:prefix_cache_hits"),
    Counter("prefix_cache_hit_rate", Kind.RATIO, "ratio", "share of the prompt tokens sent that the prefix cache "
            "served (0 when caching is off or the engine shares no blocks)",
            "vllm:prefix_cache_hits / vllm:prompt_tokens", ("prefix_cache_hits", "prompt_tokens")),
    Counter("kv_cache_usage_perc", Kind.PEAK, "ratio", "peak fraction of the KV-cache pool in use (0..1)",
            "vllm:kv_cache_usage_perc"),
    Counter("num_requests_running", Kind.PEAK, "requests", "peak requests running in one engine step",
            "vllm:num_requests_running"),
    Counter("num_requests_waiting", Kind.PEAK, "requests", "peak requests queued in the engine, not yet running",
            "vllm:num_requests_waiting"),
    Counter("engine_steps", Kind.COUNT, "steps", "engine steps (forward passes) that produced tokens",
            "vllm:iteration_tokens_total (count)"),
    Counter("iteration_tokens_mean", Kind.RATIO, "tokens", "tokens per engine step: the batch the scheduler formed",
            "vllm:iteration_tokens_total (sum / count)", ("iteration_tokens_total", "engine_steps")),
    Counter("num_requests_running_mean", Kind.RATIO, "requests", "requests per engine step: the batch formed, "
            "in requests", "", ("running_request_steps", "engine_steps")),
    Counter("padding_waste", Kind.RATIO, "ratio", "fraction of the token slots computed that were padding or "
            "discarded (static batches)", "", ("wasted_token_slots", "computed_token_slots")),
    Counter("request_prefill_time_seconds", Kind.RATIO, "seconds", "mean time a request spent in prefill "
            "(first scheduled to first token)", "vllm:request_prefill_time_seconds (sum / count)",
            ("prefill_time_seconds_sum", "finished_requests")),
    Counter("request_decode_time_seconds", Kind.RATIO, "seconds", "mean time a request spent in decode "
            "(first token to last token)", "vllm:request_decode_time_seconds (sum / count)",
            ("decode_time_seconds_sum", "finished_requests")),
)
BY_NAME: dict[str, Counter] = {c.name: c for c in COUNTERS}
RAW: frozenset[str] = frozenset(key for c in COUNTERS for key in c.raw)
# counters that are a fraction of a whole: at most 1 (vLLM's kv_cache_usage_perc too, despite its name)
FRACTIONS: frozenset[str] = frozenset(c.name for c in COUNTERS if c.unit == "ratio")


def fraction_problem(key: str, value: float) -> str | None:
    """Why ``value`` cannot be counter ``key`` because it is a fraction above 1; None otherwise."""
    return f"{key} is {value!r}: a fraction of a whole, at most 1" if key in FRACTIONS and value > 1 else None


def absent_all(reason: str, except_: Iterable[str] = ()) -> dict[str, str]:
    """``reason`` for every counter not in ``except_``."""
    keep = set(except_)
    return {c.name: reason for c in COUNTERS if c.name not in keep}


def round_counters(values: Mapping[str, float], absent: Mapping[str, str], source: str) -> dict[str, Any]:
    """One run's counters; ValueError when a counter is neither given nor said to be absent."""
    if unknown := sorted(set(values) - RAW):
        raise ValueError(f"unknown raw counter(s) {', '.join(unknown)}; known: {', '.join(sorted(RAW))}")
    if unknown := sorted(set(absent) - set(BY_NAME)):
        raise ValueError(f"unknown counter(s) said absent: {', '.join(unknown)}")
    for key, value in values.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise ValueError(f"counter {key} is {value!r}, not a finite number >= 0")
        if why := fraction_problem(key, value):
            raise ValueError(f"counter {why}")
    unaccounted = [c.name for c in COUNTERS if c.name not in absent and not all(k in values for k in c.raw)]
    if unaccounted:
        raise ValueError(f"counter(s) {', '.join(unaccounted)} neither measured nor said absent (with a reason)")
    return {**{k: values[k] for k in sorted(values)}, ABSENT: dict(absent), SOURCE: source}


def summarise(rounds: list[Mapping[str, Any]]) -> dict[str, Any]:
    """The cell's counters from its measured rounds' (see the module doc); {} when no round has any."""
    rounds = [r for r in rounds if r]
    if not rounds:
        return {}
    out: dict[str, Any] = {}
    absent: dict[str, str] = {}
    for counter in COUNTERS:
        why = _why_absent(counter, rounds)
        if why is not None:
            absent[counter.name] = why
            continue
        if counter.kind is Kind.COUNT:
            out[counter.name] = sum(float(r[counter.name]) for r in rounds) / len(rounds)
        elif counter.kind is Kind.PEAK:
            out[counter.name] = max(float(r[counter.name]) for r in rounds)
        else:
            num, den = counter.raw
            total = sum(float(r[den]) for r in rounds)
            if total > 0:
                out[counter.name] = sum(float(r[num]) for r in rounds) / total
            else:
                absent[counter.name] = f"no {den.replace('_', ' ')} to divide by"
    sources = sorted({str(r.get(SOURCE, "")) for r in rounds} - {""})
    return {**out, ABSENT: absent, SOURCE: "; ".join(sources)}


def _why_absent(counter: Counter, rounds: list[Mapping[str, Any]]) -> str | None:
    """Why ``counter`` is absent from the cell (the first round's reason); None when every round has it."""
    reasons = [(i, r.get(ABSENT, {}).get(counter.name) or "not reported") for i, r in enumerate(rounds)
               if counter.name in r.get(ABSENT, {}) or not all(k in r for k in counter.raw)]
    if not reasons:
        return None
    if len(reasons) == len(rounds) and len({why for _, why in reasons}) == 1:
        return reasons[0][1]  # the same in every round
    i, why = reasons[0]
    return f"round {i + 1} of {len(rounds)}: {why}"


def problem(counters: Any) -> str | None:
    """What is wrong with a cell's ``counters`` section as read from a file; None when it is sound."""
    if not isinstance(counters, Mapping):
        return f"is a {type(counters).__name__}, not a mapping"
    for key, value in counters.items():
        if key == ABSENT:
            if not isinstance(value, Mapping) or not all(isinstance(v, str) for v in value.values()):
                return "absent must map each counter to the reason it is absent"
            if both := sorted(set(value) & set(counters)):
                return f"{', '.join(both)} both measured and said absent"
        elif key == SOURCE:
            if not isinstance(value, str):
                return f"source is {value!r}, not text"
        elif isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            return f"{key} is {value!r}, not a finite number >= 0"
        elif why := fraction_problem(key, value):
            return why
    return None
