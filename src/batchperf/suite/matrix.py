"""The cell matrix: every tier's models, backends, batch sizes, prompt lengths, concurrencies.

This is the one place to edit the default matrix. The command line narrows or
replaces any axis (``--batchperf-batch-sizes 1,8`` …, see the plugin). Axis
values stay raw strings until a cell runs, so one bad entry fails its own cells
with a message naming it while every other cell still runs.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass, field, fields, replace
from typing import Any

from batchperf.engine.policies import PolicySpec, parse_policy
from batchperf.measure.devices import DEVICE_TYPES
from batchperf.workload.spec import Arrival, LengthSpec, WorkloadSpec
from batchperf.workload.traffic import number_text, parse_load, parse_workload, workload_label

SYNTHETIC = "synthetic"
FCFS = "fcfs"  # the default batching policy (--batchperf-policies): the engine's own scheduler, as before issue 27


@dataclass(frozen=True, slots=True)
class TrafficCell:
    """One extra cell of a tier on a workload kind of its own (issue 24): not multiplied over the matrix."""

    backend: str
    workload: str
    batch_size: str = "4"
    prompt_len: str = "64"
    concurrency: str = "4"
    output_lens: str | None = None  # None: the tier's
    policy: str = FCFS  # a --batchperf-policies entry (issue 27)
    slices: tuple[str, ...] | None = None  # the named slices (--batchperf-slice) that keep it; None: every one


@dataclass(frozen=True, slots=True)
class Tier:
    name: str
    device: str  # "cpu" or "cuda"
    models: tuple[str, ...]
    backends: tuple[str, ...]
    batch_sizes: tuple[str, ...]
    prompt_lens: tuple[str, ...]
    concurrency: tuple[str, ...]
    num_prompts: int
    rounds: int  # measured rounds per cell; their spread feeds the regression gate
    warmup_rounds: int = 1  # whole-cell rounds run first and not counted
    arrival: str = "closed"
    output_lens: str = "16,32"  # per-request targets, cycled (the study alternates 16 and 32)
    tp: tuple[str, ...] = ("1",)  # tensor-parallel sizes; an axis of vllm cells only (GPUs per cell)
    # backend -> axis -> values: a smaller sub-matrix for that backend (an axis given on the
    # command line replaces the limit too)
    limits: dict[str, dict[str, tuple[str, ...]]] = field(default_factory=dict, hash=False)
    # slice name -> backend ("*": every backend) -> axis -> values: a named subset of the tier's cells, with the
    # same ids (and so the same baselines); ``--batchperf-slice NAME`` selects it
    slices: dict[str, dict[str, dict[str, tuple[str, ...]]]] = field(default_factory=dict, hash=False)
    workloads: tuple[str, ...] = (SYNTHETIC,)  # --batchperf-workloads: synthetic, prefix:…, trace:…, tenants:…
    load: tuple[str, ...] = ("1",)  # offered-load factors (--batchperf-load)
    policies: tuple[str, ...] = (FCFS,)  # batching policies (--batchperf-policies; batchperf.engine.policies)
    # a few cells on the other workload kinds; dropped when the command line gives any axis they fix
    traffic: tuple[TrafficCell, ...] = ()

    def _axis(self, backend: str, axis: str) -> tuple[str, ...]:
        return self.limits.get(backend, {}).get(axis, getattr(self, axis))

    def cells(self) -> list[CellParams]:
        cells = [
            CellParams(self.name, self.device, m, b, bs, p, c, str(self.num_prompts), self.rounds,
                       self.warmup_rounds, self.arrival, self.output_lens, tp=tp, workload=w, load=x, policy=pol)
            for m, b in itertools.product(self.models, self.backends)
            for bs, p, c in itertools.product(*(self._axis(b, a) for a in ("batch_sizes", "prompt_lens", "concurrency")))
            for tp in (self.tp if takes_tp(b) else ("1",))
            for w, x, pol in itertools.product(self.workloads, self.load, self.policies)
        ]
        cells += [CellParams(self.name, self.device, m, t.backend, t.batch_size, t.prompt_len, t.concurrency,
                             str(self.num_prompts), self.rounds, self.warmup_rounds, self.arrival,
                             t.output_lens or self.output_lens, workload=t.workload, policy=t.policy)
                  for m in self.models for t in self.traffic if t.backend in self.backends]
        return cells


def takes_tp(backend: str) -> bool:
    """Only vLLM backends shard a model over GPUs (tensor_parallel_size)."""
    return backend.startswith("vllm")


# The peer backends are measured on a few cells of the CPU tier: enough to exercise them for
# real on every change, while the two first-principles backends cover the whole matrix.
TRAFFIC_FIXTURES = "fixtures/traffic"  # made by tools/make_example_trace.py; paths are from the repository root
TWO_TENANTS = f"tenants:{TRAFFIC_FIXTURES}/two_tenants.toml"
GPU_TWO_TENANTS = f"tenants:{TRAFFIC_FIXTURES}/two_tenants_gpu.toml"  # the same two tenants at the GPU tier's scale
GPU_POLICY_CELLS = ("fcfs", "seed", "aimd", "priority", "fair")  # every policy of batchperf's engine
# beside fcfs: CI's policy cells (issue 27). Each two-tenant cell is 3 runs (a warm-up, 2 rounds) of its 3.2 s
# arrival schedule: 9.7 s each with --durations (OMP_NUM_THREADS=1, as `make test`), so these two add ~19 s; fair
# (9.8 s) would bring it to 29 s, too close to CI's 30 s: it runs on the GPU tier and with --batchperf-policies
CPU_POLICY_CELLS = ("aimd", "priority")
_CPU_PEER_CELLS = {"batch_sizes": ("4",), "prompt_lens": ("64",), "concurrency": ("4", "16")}
_CPU_PEERS = ("hf-continuous", "vllm", "vllm-server")
# CI's slice of the CPU tier (`make test`; `make bench` runs it all): every backend, the extremes of each axis
# of the two first-principles backends (bs 1 and 8: unbatched and batched; p64 and p512: two prompt lengths for
# the KV-growth fit; c4 and c16: concurrency below and above the batch), each peer on one cell.
_CPU_CI_SLICE = {
    "*": {"batch_sizes": ("1", "8"), "prompt_lens": ("64", "512"), "concurrency": ("4", "16")},
    **{name: {**_CPU_PEER_CELLS, "concurrency": ("16",)} for name in _CPU_PEERS},
}

TIERS: dict[str, Tier] = {
    # The CPU tier: every code path on a tiny random-weight model, small enough for CI on 2 cores.
    "cpu": Tier(
        "cpu", "cpu", models=("tiny-qwen2",),
        backends=("hf-static", "continuous", "hf-continuous", "vllm", "vllm-server"),
        batch_sizes=("1", "4", "8"), prompt_lens=("64", "256", "512"), concurrency=("4", "8", "16"),
        num_prompts=16, rounds=2,
        limits={name: _CPU_PEER_CELLS for name in _CPU_PEERS},
        slices={"ci": _CPU_CI_SLICE},
        traffic=(  # issue 24: shared prefixes (vLLM's CPU block: 128 tokens), two bursty tenants, a trace
            # short outputs: the prefix is what these cells measure (they add ~90 s to the CPU tier, vLLM's two
            # engine builds included: one with prefix caching, one with the priority policy)
            TrafficCell("vllm", "prefix:2:128", prompt_len="32", output_lens="4,8"),
            # issue 37: long prompts, where an upgrade's chunked prefill shows: 4 × 2048 prompt tokens in flight
            # against vLLM's CPU step budget of 4096 tokens (the LLM class's default), so prefills are split;
            # the whole tier only (its 16 × 2048-token prompts are too long for CI's slice)
            TrafficCell("vllm", SYNTHETIC, prompt_len="2048", concurrency="16", slices=()),
            TrafficCell("continuous", "prefix:2:128", prompt_len="32", output_lens="4,8"),
            TrafficCell("continuous", TWO_TENANTS),
            # vLLM's own priority policy on the same traffic (issue 27: under fcfs vLLM is sent no priorities)
            TrafficCell("vllm", TWO_TENANTS, policy="priority"),
            TrafficCell("continuous", f"trace:{TRAFFIC_FIXTURES}/mini_trace.jsonl"),
            # issue 27: batching policies in batchperf's engine, on the two tenants beside the fcfs cell above
            *(TrafficCell("continuous", TWO_TENANTS, policy=p) for p in CPU_POLICY_CELLS),
            # every backend runs every kind: the two transformers backends on each (no prefix cache, priority
            # ignored and said so in the record); the whole tier only (`make bench`), not CI's slice
            *(TrafficCell(b, w, **kw, slices=()) for b in ("hf-static", "hf-continuous") for w, kw in (
                ("prefix:2:128", {"prompt_len": "32", "output_lens": "4,8"}),
                (TWO_TENANTS, {}),
                (f"trace:{TRAFFIC_FIXTURES}/mini_trace.jsonl", {}),
            )),
        ),
    ),
    # The GPU tier: real checkpoints, hundreds of requests per cell so P99 means something.
    "gpu": Tier(
        "gpu", "cuda", models=("qwen2.5-0.5b", "qwen2.5-1.5b"), backends=("hf-static", "continuous", "vllm"),
        batch_sizes=("1", "4", "8", "16", "32", "64"), prompt_lens=("128", "512", "2048"),
        concurrency=("16", "64"), num_prompts=256, rounds=3,
        traffic=(
            # issue 24 at the GPU tier's scale, on the two backends that take priority (docs/gpu.md)
            *(TrafficCell(b, w, batch_size="32", prompt_len=p, concurrency="256")  # 256: above the requests in flight
              for b in ("vllm", "continuous") for w, p in (
                  # four system prompts of 1024 tokens (64 of vLLM's 16-token GPU blocks) + 512 distinct tokens each
                  ("prefix:4:1024", "512"),
                  # interactive (TTFT <= 200 ms) beside long-prompt batch requests, ~20 req/s in all
                  (GPU_TWO_TENANTS, "128"),
                  # 512 requests at ~40 req/s over 13 s, four shared 512-token system blocks
                  (f"trace:{TRAFFIC_FIXTURES}/gpu_trace.jsonl", "128"),
              )),
            # issue 27: the same two tenants under every other policy of batchperf's engine, and vLLM's priority
            *(TrafficCell("continuous", GPU_TWO_TENANTS, batch_size="32", prompt_len="128", concurrency="256",
                          policy=p) for p in GPU_POLICY_CELLS if p != FCFS),
            TrafficCell("vllm", GPU_TWO_TENANTS, batch_size="32", prompt_len="128", concurrency="256",
                        policy="priority"),
        ),
    ),
}

AXES = ("models", "backends", "batch_sizes", "prompt_lens", "concurrency", "tp", "workloads", "load", "policies")
# a command-line value for any of these replaces the tier's traffic cells (they fix these axes themselves)
TRAFFIC_AXES = ("batch_sizes", "prompt_lens", "concurrency", "workloads", "load", "policies")


def is_default_policy(text: str) -> bool:
    """The entry is plain ``fcfs`` (a malformed one is not: its cell names it and fails)."""
    try:
        return parse_policy(text).is_default
    except ValueError:
        return False


def policy_label(text: str) -> str:
    """The policy's short, id-safe label (``aimd``, ``aimd-decrease0.7``); a malformed entry: its text, so that its
    cell is still named (and fails with the parse error)."""
    try:
        return parse_policy(text).label
    except ValueError:
        return re.sub(r"[^A-Za-z0-9.=_-]+", "_", text.strip())


def parse_arrival(text: str) -> Arrival:
    """``closed``, ``burst``, or ``rate:R[:BURSTINESS]`` (requests/s, gamma gaps)."""
    kind, *rest = text.strip().split(":")
    try:
        if kind == "rate":
            if len(rest) > 2:
                raise ValueError("too many numbers")
            rate = float(rest[0])
            return Arrival("rate", rate, float(rest[1]) if len(rest) > 1 else 1.0)
        if rest:
            raise ValueError
        return Arrival(kind)  # type: ignore[arg-type]
    except (IndexError, ValueError) as exc:
        detail = f": {exc}" if str(exc) else ""
        raise ValueError(f"bad arrival {text!r}{detail}; use closed, burst or rate:REQ_PER_S[:BURSTINESS]") from None


def _positive_int(name: str, raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1 or str(value) != raw.strip():
        raise ValueError(f"invalid {name} {raw!r}: must be a whole number >= 1")
    return value


@dataclass(frozen=True, slots=True)
class CellParams:
    """One cell as given (raw strings); :meth:`resolve` validates it."""

    tier: str
    device: str
    model: str
    backend: str
    batch_size: str
    prompt_len: str
    concurrency: str
    num_prompts: str
    rounds: int
    warmup_rounds: int
    arrival: str
    output_lens: str = "16,32"
    seed: int = 0
    tp: str = "1"
    workload: str = SYNTHETIC  # a --batchperf-workloads entry
    load: str = "1"  # the offered-load factor
    policy: str = FCFS  # a --batchperf-policies entry

    @property
    def id(self) -> str:
        """Unchanged for a synthetic cell at load 1 under fcfs (so its baseline key is); else ``-w<label>`` (kind
        and the file's hash), ``-load<X>`` and ``-pol<policy label>`` are appended."""
        try:
            plabel = LengthSpec.parse(self.prompt_len).label
        except ValueError:
            plabel = self.prompt_len
        base = f"{self.tier}-{self.model}-{self.backend}-bs{self.batch_size}-p{plabel}-c{self.concurrency}"
        base = f"{base}-tp{self.tp}" if takes_tp(self.backend) and self.tp != "1" else base
        if self.workload.strip() != SYNTHETIC:
            base += f"-w{workload_label(self.workload)}"
        if self.load.strip() != "1":
            base += f"-load{self.load.strip()}"
        if not is_default_policy(self.policy):
            base += f"-pol{policy_label(self.policy)}"
        return base

    def resolve(self) -> Cell:
        spec = self.base_workload()
        return Cell(
            params=self,
            batch_size=_positive_int("batch size", self.batch_size),
            concurrency=_positive_int("concurrency", self.concurrency),
            tp=_positive_int("tensor-parallel size", self.tp),
            workload=spec,
            traffic=parse_workload(self.workload, spec, parse_load(self.load)),
            policy=parse_policy(self.policy),
        )

    def base_workload(self) -> WorkloadSpec:
        return WorkloadSpec(
            num_prompts=_positive_int("num_prompts", self.num_prompts),
            prompt_len=LengthSpec.parse(self.prompt_len),
            arrival=parse_arrival(self.arrival),
            output_lens=tuple(_positive_int("output length", v) for v in split_list(self.output_lens)),
            num_warmup=WorkloadSpec.default_warmup(_positive_int("num_prompts", self.num_prompts)),
            seed=self.seed,
        )


@dataclass(frozen=True, slots=True)
class Cell:
    params: CellParams
    batch_size: int
    concurrency: int
    workload: WorkloadSpec  # the cell's synthetic spec: lengths, counts, arrival, seed
    tp: int = 1
    traffic: Any = None  # the workload kind (batchperf.workload.traffic.parse_workload); None: synthetic
    policy: PolicySpec | None = None  # the batching policy (batchperf.engine.policies); None: fcfs

    @property
    def id(self) -> str:
        return self.params.id

    def describe(self) -> dict[str, object]:
        """The cell's parameters as stored in results (``extra_info["cell"]``)."""
        arrival = self.workload.arrival
        return {
            "id": self.id, "tier": self.params.tier, "model": self.params.model, "backend": self.params.backend,
            "batch_size": self.batch_size, "prompt_len": self.params.prompt_len, "concurrency": self.concurrency,
            "num_prompts": self.workload.num_prompts, "num_warmup": self.workload.num_warmup,
            "output_lens": list(self.workload.output_lens),
            "arrival": {"kind": arrival.kind, "rate": arrival.rate if math.isfinite(arrival.rate) else None,
                        "burstiness": arrival.burstiness},
            "seed": self.workload.seed, "rounds": self.params.rounds, "warmup_rounds": self.params.warmup_rounds,
            "device": self.params.device,
            # vllm cells only, so the identity of every other cell (and its baseline) is unchanged
            **({"tp": self.tp} if takes_tp(self.params.backend) else {}),
            # other workloads only, likewise
            **({"workload": self.params.workload.strip()} if self.params.workload.strip() != SYNTHETIC else {}),
            **({"load": parse_load(self.params.load)} if self.params.load.strip() != "1" else {}),
            **({"policy": self.policy.text} if self.policy is not None and not self.policy.is_default else {}),
        }


def split_list(text: str) -> tuple[str, ...]:
    """``"1, 4,8"`` -> ``("1", "4", "8")``; prompt mixes keep their own commas inside brackets: ``[64,256]``."""
    items, depth, current = [], 0, ""
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += ch
    items.append(current)
    return tuple(i.strip().strip("[]") for i in items if i.strip())


def sliced(tier: Tier, name: str) -> Tier:
    """``tier`` narrowed to its slice ``name`` (same cell ids); a tier without that slice is returned whole."""
    if name not in tier.slices:
        return tier
    cut = tier.slices[name]
    limits = {b: {**tier.limits.get(b, {}), **cut.get("*", {}), **cut.get(b, {})} for b in tier.backends}
    traffic = tuple(t for t in tier.traffic if t.slices is None or name in t.slices)
    return replace(tier, limits=limits, traffic=traffic)


def slice_names() -> set[str]:
    return {name for tier in TIERS.values() for name in tier.slices}


def narrowed(tier: Tier, **overrides: str | None) -> Tier:
    """``tier`` with any axis (``models``, ``batch_sizes`` …) or ``num_prompts``/``rounds``/``arrival`` replaced,
    or cut to a named ``slice`` first (an axis given too replaces the slice's limit)."""
    changes: dict[str, object] = {}
    names = {f.name for f in fields(Tier)} - {"slices", "limits"}
    if (name := overrides.pop("slice", None)) is not None:
        if name.strip() not in slice_names():
            raise ValueError(f"unknown slice {name!r}: the tiers define {', '.join(sorted(slice_names())) or 'none'}")
        tier = sliced(tier, name.strip())
    for key, value in overrides.items():
        if value is None:
            continue
        if key not in names:
            raise ValueError(f"unknown matrix setting {key!r}")
        if key == "policies":
            changes[key] = checked_policies(value)
        elif key == "load":
            changes[key] = checked_loads(value)
        elif key == "workloads":
            changes[key] = checked_workloads(value)
        elif key in AXES:
            changes[key] = split_list(value)
        elif key in ("num_prompts", "rounds", "warmup_rounds"):
            changes[key] = _positive_int(key, value) if key != "warmup_rounds" else int(value)
        elif key == "device" and value.strip() not in DEVICE_TYPES:
            raise ValueError(f"invalid device {value!r}: use {' or '.join(DEVICE_TYPES)}")
        elif key == "device":
            changes[key] = value.strip()
        else:
            changes[key] = value
    limits = {b: {a: v for a, v in axes.items() if a not in changes} for b, axes in tier.limits.items()}
    if any(a in changes for a in TRAFFIC_AXES):
        changes["traffic"] = ()
    return replace(tier, **changes, limits=limits)


def checked_loads(text: str) -> tuple[str, ...]:
    """The ``--batchperf-load`` factors, each parsed now (0, -1, inf, nan are a usage error before any cell) and
    spelled one way (``1.0``, ``01`` and ``1`` are one load: one cell id); a load given twice is refused."""
    entries = split_list(text)
    if not entries:
        raise ValueError(f"--batchperf-load {text!r}: no load factor given; e.g. 0.5,1,2")
    seen: dict[str, str] = {}
    for entry in entries:
        try:
            canonical = number_text(parse_load(entry))
        except ValueError as exc:
            raise ValueError(f"--batchperf-load: {exc}") from None
        if canonical in seen:
            raise ValueError(f"--batchperf-load {text!r}: {seen[canonical]!r} and {entry!r} are the same load "
                             f"({canonical}); give each load once")
        seen[canonical] = entry
    return tuple(seen)


def checked_workloads(text: str) -> tuple[str, ...]:
    """The ``--batchperf-workloads`` entries; two that name one workload (one label: the same kind, file and
    options, a link and its file) would be two tests with one cell id, so they are refused. A malformed entry is
    kept: its cells fail with the reason."""
    entries = split_list(text)
    seen: dict[str, str] = {}
    for entry in entries:
        label = workload_label(entry)
        if label in seen:
            raise ValueError(f"--batchperf-workloads: {seen[label]!r} and {entry!r} are the same workload "
                             f"({label}); give it once")
        seen[label] = entry
    return entries


def checked_policies(text: str) -> tuple[str, ...]:
    """The ``--batchperf-policies`` entries, each parsed now: a bad one is a usage error before any cell runs."""
    entries = split_policies(text)
    if not entries:
        raise ValueError(f"--batchperf-policies {text!r}: no policy given; e.g. fcfs,aimd,priority")
    for entry in entries:
        try:
            parse_policy(entry)
        except ValueError as exc:
            raise ValueError(f"--batchperf-policies entry {entry!r}: {exc}") from None
    return entries


def split_policies(text: str) -> tuple[str, ...]:
    """``"fcfs,aimd:decrease=0.7,step=2,priority"`` -> ``("fcfs", "aimd:decrease=0.7,step=2", "priority")``: a
    comma followed by ``k=v`` continues the policy before it (its parameters)."""
    entries: list[str] = []
    for part in (p.strip() for p in text.split(",")):
        if entries and "=" in part and ":" not in part:
            entries[-1] += f",{part}"
        elif part:
            entries.append(part)
    return tuple(entries)


def cell_id(item: object) -> str | None:
    """The cell id of a pytest item that is a performance cell (parametrized with ``batchperf_params``), else None."""
    params = getattr(item, "callspec", None)
    cell = params.params.get("batchperf_params") if params is not None else None
    return getattr(cell, "id", None)
