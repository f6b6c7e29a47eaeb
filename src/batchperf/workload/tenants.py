"""Tenants: several request streams sharing one deployment, each with its arrivals, lengths, priority and SLOs.

One documented format, TOML (read with the standard library's ``tomllib``)::

    seed = 0                      # optional: the token ids and arrival gaps

    [tenants.interactive]
    requests = 12                 # requests this tenant sends
    rate = 6.0                    # requests/s (x the load factor, --batchperf-load)
    burstiness = 0.5              # gamma shape of the gaps: 1 Poisson, < 1 burstier (vllm bench serve's)
    on_s = 1.0                    # optional on/off bursts: send only during on_s, then pause off_s
    off_s = 2.0
    prompt_len = "32-96"          # as --batchperf-prompt-lens: 64, short, 32-96, or "32,64"
    output_lens = [8, 16]         # cycled
    priority = 0                  # lower is served first (vLLM's per-request priority)
    slo = { ttft_ms = 200, tpot_ms = 50, e2el_ms = 2000 }   # any of the three; all > 0

    [tenants.batch]
    requests = 4
    rate = 1.0
    prompt_len = 256
    output_lens = [32]
    priority = 1
    slo = { e2el_ms = 20000 }

Every tenant's requests are merged by send time; all are sent open loop at their times. A field not
listed here is refused with its name (a typo would otherwise be ignored).
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from batchperf.measure.metrics import SLO, SLO_FIELDS
from batchperf.workload.replay import MAX_PRIORITY, MAX_TOKENS, exact, file_hash, name_problem, real, shown
from batchperf.workload.spec import MAX_SCHEDULE_S, Arrival, LengthSpec, RequestSpec, Workload, WorkloadSpec
from batchperf.workload.synth import MAX_REQUESTS, TokenSynth, check_fits, check_memory, file_stem

TOP_FIELDS = {"seed", "tenants"}
TENANT_FIELDS = {"requests", "rate", "burstiness", "on_s", "off_s", "prompt_len", "output_lens", "priority", "slo"}


@dataclass(frozen=True, slots=True)
class Tenant:
    name: str
    requests: int
    rate: float
    burstiness: float
    prompt_len: LengthSpec
    output_lens: tuple[int, ...]
    priority: int
    slo: SLO
    on_s: float | None = None
    off_s: float = 0.0

    def offsets(self, rng: np.random.Generator, load: float) -> list[float]:
        """Send times (s): gamma gaps at ``rate x load``, mapped onto the on periods when on/off is given."""
        times = Arrival("rate", self.rate * load, self.burstiness).offsets(rng, self.requests)
        if self.on_s is None:
            return times
        # a time past what a float counts stays unbounded (the workload then refuses its schedule by its length)
        return [t + math.floor(t / self.on_s) * self.off_s if math.isfinite(t / self.on_s) else math.inf
                for t in times]


def _number(value: Any, where: str, *, whole: bool = False, low: float = 0.0, strict: bool = True,
            high: float = math.inf, bound: str = "") -> float:
    """``value`` if it is a number above ``low`` and at most ``high`` (``bound`` says what that limit is)."""
    # real(): an integer beyond a float (10**400) would overflow math.isfinite, so it is refused as out of bounds
    ok = real(value) and (value > low if strict else value >= low) and value <= high and (not whole or value == int(value))
    if not ok:
        kind = "a whole number" if whole else "a finite number"
        upper = f" and at most {exact(high)} ({bound})" if math.isfinite(high) else ""
        raise ValueError(f"{where} is {shown(value)}; it must be {kind} {'>' if strict else '>='} {exact(low)}{upper}")
    return value


# Bounds of a tenant's numbers, each said in its error. A gamma shape below 1e-3 draws gaps that are nearly all
# 0 or one vast one; on periods shorter than a millisecond are below the sender's clock (and 1e-320 s overflows
# the mapping of send times onto them).
BURSTINESS = (1e-3, 1e3)
MIN_ON_S = 1e-3
MAX_SLO_MS = MAX_SCHEDULE_S * 1e3


def parse_tenant(name: str, data: Any, where: str) -> Tenant:
    at = f"{where}: tenant {name!r}"
    if not name.strip():  # "" is the block of a workload without tenants (measure.slo.NO_TENANT)
        raise ValueError(f"{where}: a tenant named {name!r}; name each tenant with some text ([tenants.chat])")
    if problem := name_problem(name):
        raise ValueError(f"{at} {problem}")
    if not isinstance(data, dict):
        raise ValueError(f"{at} must be a table of fields")
    if unknown := sorted(set(data) - TENANT_FIELDS):
        raise ValueError(f"{at}: unknown field(s) {', '.join(unknown)}; a tenant has {', '.join(sorted(TENANT_FIELDS))}")
    for key in ("requests", "rate", "prompt_len"):
        if key not in data:
            raise ValueError(f"{at}: field {key} is missing")
    slo_data = data.get("slo", {})
    if not isinstance(slo_data, dict):
        raise ValueError(f"{at}: slo must be a table, e.g. slo = {{ ttft_ms = 200 }}")
    if unknown := sorted(set(slo_data) - set(SLO_FIELDS)):
        raise ValueError(f"{at}: unknown slo field(s) {', '.join(unknown)}; an slo has {', '.join(SLO_FIELDS)}")
    slo = SLO(**{k: float(_number(v, f"{at}: slo.{k}", high=MAX_SLO_MS, bound="an SLO within a cell's time limit"))
                 for k, v in slo_data.items()})
    outs = data.get("output_lens", [16])
    if not isinstance(outs, list) or not outs:
        raise ValueError(f"{at}: output_lens must be a non-empty list of token counts, e.g. [16, 32]")
    on_s = data.get("on_s")
    if (on_s is None) != ("off_s" not in data):
        raise ValueError(f"{at}: on/off bursts need both on_s and off_s")
    try:
        prompt = LengthSpec.parse(data["prompt_len"])
    except ValueError as exc:
        raise ValueError(f"{at}: prompt_len: {exc}") from None
    if prompt.high > MAX_TOKENS:
        raise ValueError(f"{at}: prompt_len {prompt.high} is beyond {MAX_TOKENS:,} tokens (a length within any "
                         f"model's context)")
    schedule = "a period within a cell's time limit"
    return Tenant(
        name, int(_number(data["requests"], f"{at}: requests", whole=True, high=MAX_REQUESTS,
                          bound="requests within what memory holds")),
        float(_number(data["rate"], f"{at}: rate")),
        float(_number(data.get("burstiness", 1.0), f"{at}: burstiness", low=BURSTINESS[0], strict=False,
                      high=BURSTINESS[1], bound="a gamma shape from bursty to near-even gaps")), prompt,
        tuple(int(_number(v, f"{at}: output_lens", whole=True, high=MAX_TOKENS,
                          bound="a length within any model's context")) for v in outs),
        int(_number(data.get("priority", 0), f"{at}: priority", whole=True, low=-MAX_PRIORITY, strict=False,
                    high=MAX_PRIORITY - 1, bound="a priority within 32 bits, as a trace's")), slo,
        None if on_s is None else float(_number(on_s, f"{at}: on_s", low=MIN_ON_S, strict=False,
                                                high=MAX_SCHEDULE_S, bound=schedule)),
        0.0 if on_s is None else float(_number(data["off_s"], f"{at}: off_s", strict=False, high=MAX_SCHEDULE_S,
                                               bound=schedule)))


def read_tenants(path: Path) -> tuple[int, list[Tenant]]:
    """(seed, tenants) of a tenants file; ValueError names the file, the tenant and the field."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"tenants file {path}: cannot be read ({exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"tenants file {path}: not TOML ({exc})") from None
    if unknown := sorted(set(data) - TOP_FIELDS):
        raise ValueError(f"tenants file {path}: unknown field(s) {', '.join(unknown)}; the file has seed and "
                         f"[tenants.NAME] tables")
    tenants = data.get("tenants")
    if not isinstance(tenants, dict) or not tenants:
        raise ValueError(f"tenants file {path}: no [tenants.NAME] table; name at least one tenant")
    seed = int(_number(data.get("seed", 0), f"tenants file {path}: seed", whole=True, strict=False, high=2**63 - 1,
                       bound="a seed within 64 bits"))
    parsed = [parse_tenant(name, body, f"tenants file {path}") for name, body in tenants.items()]
    check_memory(sum(t.requests for t in parsed), sum(t.requests * t.prompt_len.high for t in parsed),
                 f"tenants file {path}")
    return seed, parsed


@dataclass(frozen=True, slots=True)
class TenantsKind:
    base: WorkloadSpec
    path: Path
    text: str
    load: float = 1.0
    kind = "tenants"

    @property
    def file_hash(self) -> str:
        return file_hash(self.path)

    @property
    def label(self) -> str:
        return f"tenants-{file_stem(self.path.resolve())}-{self.file_hash[:8]}"

    def build(self, vocab_size: int, max_model_len: int, first_token_id: int = 0) -> Workload:
        seed, tenants = read_tenants(self.path)
        synth = TokenSynth(seed, vocab_size, first_token_id)
        rng = np.random.Generator(np.random.PCG64(seed))
        drafts = []  # (offset, tenant index, order within the tenant, prompt length, output length)
        for t_index, tenant in enumerate(tenants):
            check_fits(tenant.prompt_len.high, max(tenant.output_lens), max_model_len,
                       f"tenants file {self.path}: tenant {tenant.name!r}")
            lengths = tenant.prompt_len.draw(rng, tenant.requests)
            try:
                offsets = tenant.offsets(rng, self.load)
            except ValueError as exc:  # rate x load beyond a float (0 or inf)
                raise ValueError(f"tenants file {self.path}: tenant {tenant.name!r} at load {self.load:g}: {exc}") from None
            for k, offset in enumerate(offsets):
                drafts.append((offset, t_index, k, lengths[k], tenant.output_lens[k % len(tenant.output_lens)]))
        drafts.sort()
        requests = tuple(
            RequestSpec(i, synth.tokens(6, i, plen), olen, offset, tenant=tenants[t].name,
                        priority=tenants[t].priority)
            for i, (offset, t, _, plen, olen) in enumerate(drafts))
        warm = tuple(RequestSpec(-(i + 1), synth.tokens(5, i, r.prompt_len), r.target_len)
                     for i, r in enumerate(requests[:WorkloadSpec.default_warmup(len(requests))]))
        return Workload(spec=self.base, requests=requests, warmup=warm, kind=self.kind, label=self.label,
                        load=self.load, slos={t.name: t.slo for t in tenants if t.slo.any},
                        file_hash=self.file_hash, unlimited=True)
