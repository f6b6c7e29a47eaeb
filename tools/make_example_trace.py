"""Write the example traffic files in fixtures/traffic/: a short Mooncake-style JSONL trace and a two-tenant file.

No third-party data: the trace is drawn from a seeded generator. Four "system prompts" of one 512-token block each
are shared by the requests (hash_ids), each request adding its own block of user text, so replaying it exercises a
prefix cache; two tenants, the interactive one at priority 0; one steady Poisson tenant for the policy study.
Run from the repository root:

    python tools/make_example_trace.py
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

OUT = Path("fixtures/traffic")
BLOCK = 512  # tokens per hash id (Mooncake's)


def trace_lines(n: int = 12, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    gaps_ms = rng.gamma(shape=0.5, scale=100.0, size=n)  # bursty: mean 50 ms between requests
    t, lines = 0.0, []
    for i in range(n):
        system = int(rng.integers(0, 4))
        user_len = int(rng.integers(16, 128))
        tenant = "interactive" if i % 3 else "batch"
        lines.append(json.dumps({"timestamp": round(t, 3), "input_length": BLOCK + user_len,
                                 "output_length": int(rng.integers(4, 12)), "hash_ids": [system, 100 + i],
                                 "tenant": tenant, "priority": 0 if tenant == "interactive" else 1}))
        t += float(gaps_ms[i])
    return lines


TENANTS = """\
# Two tenants sharing one deployment (docs/workloads.md). Rates are the CPU tier's: the tiny model on 2 cores.
seed = 0

[tenants.interactive]
requests = 12
rate = 8.0
burstiness = 0.5        # gamma gaps, burstier than Poisson
prompt_len = "16-64"
output_lens = [8, 16]
priority = 0
slo = { ttft_ms = 500, tpot_ms = 100 }

[tenants.batch]
requests = 4
rate = 2.0
on_s = 0.5              # on/off bursts: sends for 0.5 s, pauses 1 s
off_s = 1.0
prompt_len = 256
output_lens = [16]
priority = 1
slo = { e2el_ms = 20000 }
"""


SUSTAINED = """\
# A sustained two-tenant load for `batchperf capacity` on the CPU tier (docs/traffic.md):
# 60 requests, tighter SLOs, so a probe overloads the tiny model on 2 cores before the search's max load
seed = 0

[tenants.interactive]
requests = 48
rate = 8.0
burstiness = 0.5
prompt_len = "16-64"
output_lens = [8, 16]
priority = 0
slo = { ttft_ms = 150, tpot_ms = 40 }

[tenants.batch]
requests = 12
rate = 2.0
on_s = 0.5
off_s = 1.0
prompt_len = 256
output_lens = [16]
priority = 1
slo = { e2el_ms = 5000 }
"""


POISSON_ONE = """\
# One tenant, steady Poisson arrivals (burstiness 1), for the policy study (docs/policies.md): the tiny model on
# 2 cores meets these SLOs at a low offered load and misses them as --batchperf-load grows past its capacity
seed = 0

[tenants.steady]
requests = 160
rate = 40.0             # 4 s of arrivals at load 1
burstiness = 1.0        # exponential gaps: Poisson
prompt_len = "32-128"
output_lens = [8, 16]
priority = 0
slo = { ttft_ms = 250, tpot_ms = 50 }
"""


TENANTS_GPU = """\
# The two tenants of two_tenants.toml at the GPU tier's scale (its policy cells, docs/policies.md): 256 requests,
# an interactive tenant held to TTFT <= 200 ms beside a batch tenant with long prompts and a loose E2EL
seed = 0

[tenants.interactive]
requests = 192
rate = 64.0
burstiness = 0.5
prompt_len = "64-512"
output_lens = [64, 128]
priority = 0
slo = { ttft_ms = 200, tpot_ms = 50 }

[tenants.batch]
requests = 64
rate = 24.0
on_s = 1.0
off_s = 1.0
prompt_len = 2048
output_lens = [256]
priority = 1
slo = { e2el_ms = 30000 }
"""


HEAVY_LIGHT = """\
# Two tenants that both send more than the tiny model on 2 cores serves (the policy study's fairness case,
# docs/policies.md): "heavy" offers about four times "light"'s weighted tokens, so serving in arrival order gives
# it most of the service while both are backlogged
seed = 0

[tenants.heavy]
requests = 40
rate = 10.0
prompt_len = 256
output_lens = [64]
priority = 0
slo = { e2el_ms = 30000 }

[tenants.light]
requests = 80
rate = 20.0
prompt_len = "16-48"
output_lens = [8]
priority = 0
slo = { e2el_ms = 30000 }
"""


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "mini_trace.jsonl").write_text("\n".join(trace_lines()) + "\n")
    (OUT / "two_tenants.toml").write_text(TENANTS)
    (OUT / "sustained_tenants.toml").write_text(SUSTAINED)
    (OUT / "poisson_one.toml").write_text(POISSON_ONE)
    (OUT / "two_tenants_gpu.toml").write_text(TENANTS_GPU)
    (OUT / "heavy_light.toml").write_text(HEAVY_LIGHT)


if __name__ == "__main__":
    main()
