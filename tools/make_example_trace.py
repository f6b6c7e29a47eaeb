"""Write the example traffic files in fixtures/traffic/: Mooncake-style JSONL traces and two-tenant files.

No third-party data: the traces are drawn from a seeded generator. Four "system prompts" of one 512-token block
each are shared by the requests (hash_ids), each request adding its own block of user text, so replaying one
exercises a prefix cache; two tenants, the interactive one at priority 0. The CPU tier's files (mini_trace.jsonl,
two_tenants.toml, and sustained_tenants.toml for `batchperf capacity`) are sized for the tiny model on 2 cores;
the GPU tier's (gpu_trace.jsonl, two_tenants_gpu.toml) for Qwen2.5-0.5B on one H200; poisson_one.toml,
bursty_tenants.toml and heavy_light.toml are the policy study's (studies/policies/policy_study.py; bursty_tenants_small.toml is
its bursty case at the opt-in small-qwen2's scale). Run from the repository root:

    python tools/make_example_trace.py
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

OUT = Path("fixtures/traffic")
BLOCK = 512  # tokens per hash id (Mooncake's)


def trace_lines(n: int = 12, seed: int = 0, gap_scale_ms: float = 100.0, outputs: tuple[int, int] = (4, 12)
                ) -> list[str]:
    """``n`` requests; gamma gaps of shape 0.5 (bursty), mean ``gap_scale_ms`` / 2; output lengths drawn from
    ``outputs`` (high end excluded)."""
    rng = np.random.default_rng(seed)
    gaps_ms = rng.gamma(shape=0.5, scale=gap_scale_ms, size=n)  # bursty: mean 50 ms between requests by default
    t, lines = 0.0, []
    for i in range(n):
        system = int(rng.integers(0, 4))
        user_len = int(rng.integers(16, 128))
        tenant = "interactive" if i % 3 else "batch"
        lines.append(json.dumps({"timestamp": round(t, 3), "input_length": BLOCK + user_len,
                                 "output_length": int(rng.integers(*outputs)), "hash_ids": [system, 100 + i],
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


# The GPU tier's two tenants (Qwen2.5-0.5B, one H200): an interactive tenant held to TTFT <= 200 ms beside a batch
# tenant of long prompts with a loose end-to-end bound. Offered: ~16 + 4 req/s, ~13k prompt and ~2.3k output
# tokens/s, a fraction of what vLLM serves with a 0.5B model on one H200 (tens of thousands of tokens/s), so at load 1
# both tenants should meet their SLOs and a --batchperf-load sweep or `batchperf capacity` finds the edge.
TENANTS_GPU = """\
# Two tenants at the GPU tier's scale (Qwen2.5-0.5B on one H200; docs/workloads.md, docs/gpu.md).
seed = 0

[tenants.interactive]
requests = 256
rate = 16.0
burstiness = 0.5
prompt_len = "128-512"
output_lens = [64, 128]
priority = 0
slo = { ttft_ms = 200, tpot_ms = 50 }

[tenants.batch]
requests = 48
rate = 6.0
on_s = 2.0              # sends for 2 s, pauses 1 s: 4 req/s on average
off_s = 1.0
prompt_len = 2048
output_lens = [128, 256]
priority = 1
slo = { e2el_ms = 20000 }
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


BURSTY = """\
# Two tenants for the policy study's bursty case (docs/policies.md): a steady interactive tenant held to a tight
# TTFT and TPOT beside a batch tenant whose on/off bursts of long prompts fill the batch; the tiny model on 2 cores
seed = 0

[tenants.interactive]
requests = 120
rate = 20.0
burstiness = 1.0        # Poisson
prompt_len = "16-64"
output_lens = [8, 16]
priority = 0
slo = { ttft_ms = 150, tpot_ms = 40 }

[tenants.batch]
requests = 60
rate = 30.0
on_s = 0.5              # sends for 0.5 s, pauses 1 s: 10 req/s on average
off_s = 1.0
prompt_len = 384
output_lens = [32]
priority = 1
slo = { e2el_ms = 20000 }
"""


# The bursty case at small-qwen2's scale (studies/policies/README.md), its numbers from studies/continuous-step/step_profile.py on one core.
BURSTY_SMALL = """\
# Two bursty tenants at small-qwen2's scale (docs/policies.md; opt-in model: --batchperf-models small-qwen2), where
# a decode step grows with the batch: in the continuous engine on this 2-core VM (OMP_NUM_THREADS=1), quiet, about
# 8 ms at 1-3 requests, 16 at 4, 20 at 5-6, 23-25 at 7-9, 25-30 at 10-13 (under load from other sessions 1.3-1.8x
# that), so a cap trades the interactive tenant's TPOT against its queueing.
# - interactive: 2.5 req/s, Poisson, of 16-32 tokens: alone, ~1 runs at a time and its steps take ~8 ms. Its TPOT
#   SLO, 25 ms, holds at batches up to ~8 quiet (~4 under load) and is missed past ~10 (a prefill step in its
#   decode adds to its mean); 25, not 20: with 20, aimd's step target (the TPOT) sat too close to a loaded VM's
#   batch-1 step (17 ms) and cut its cap to 1 (interactive 0%). TTFT 300 ms allows a prefill step or two.
# - batch: bursts of 8 requests in 0.5 s every 4 s (2 req/s on average) of 96-token prompts and 32 output tokens:
#   uncapped, a burst holds the batch at ~10 for ~1 s and an interactive request decoding then misses its TPOT;
#   capped at 4, the burst's requests hold the slots in waves and an interactive arrival waits for a slot (TTFT:
#   fcfs at cap 4 and load 1.5 met 18% of the interactive requests, mean TTFT 740 ms). Prompts are 96 tokens, not
#   384 as at the tiny model's scale: a prompt's prefill is one unchunked step, and at this width a 384-token one
#   stalls every running request for hundreds of ms whatever the cap (a first version with 128-token prompts and
#   6 req/s interactive spent most of its steps' time in prefill).
# 20 s of arrivals at load 1: 50 interactive and 40 batch requests.
seed = 0

[tenants.interactive]
requests = 50
rate = 2.5
burstiness = 1.0        # Poisson
prompt_len = "16-48"
output_lens = [16, 32]
priority = 0
slo = { ttft_ms = 300, tpot_ms = 25 }

[tenants.batch]
requests = 40
rate = 16.0
on_s = 0.5              # sends for 0.5 s, pauses 3.5 s: 2 req/s on average
off_s = 3.5
prompt_len = 96
output_lens = [32]
priority = 1
slo = { e2el_ms = 20000 }
"""


HEAVY_LIGHT = """\
# Two tenants that both send more than the tiny model on 2 cores serves (the policy study's fairness case,
# docs/policies.md): "heavy" offers about four times "light"'s weighted tokens, so serving in arrival order gives
# it most of the service while both are backlogged
seed = 0

[tenants.heavy]
requests = 80
rate = 10.0
prompt_len = 256
output_lens = [64]
priority = 0
slo = { e2el_ms = 30000 }

[tenants.light]
requests = 160
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
    # the GPU tier's trace: 512 requests at ~40 req/s (mean gap 25 ms, bursty), 32-255 output tokens
    (OUT / "gpu_trace.jsonl").write_text("\n".join(trace_lines(512, seed=1, gap_scale_ms=50.0, outputs=(32, 256)))
                                         + "\n")
    (OUT / "two_tenants_gpu.toml").write_text(TENANTS_GPU)
    # the policy study's (docs/policies.md): one steady Poisson tenant, two backlogged tenants of unequal weight
    (OUT / "poisson_one.toml").write_text(POISSON_ONE)
    (OUT / "heavy_light.toml").write_text(HEAVY_LIGHT)
    (OUT / "bursty_tenants.toml").write_text(BURSTY)
    (OUT / "bursty_tenants_small.toml").write_text(BURSTY_SMALL)  # the same shape for small-qwen2


if __name__ == "__main__":
    main()
