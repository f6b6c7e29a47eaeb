"""The slowdown hook inside one process: the continuous backend's runs with ``BATCHPERF_INJECT_SLOWDOWN``'s wait at
each level, interleaved (ABAB…, then BABA…), in two settings:

- ``closed``: 60 requests of 64 prompt tokens, 32 output, closed loop at concurrency 64 (no sender thread,
  no sampler): the hook on the engine alone;
- ``reference``: the capacity search's reference round (the sustained tenants fixture at load 64, open loop: the
  sender thread sends) with the suite's telemetry sampler running, as in a probe's process.

Per run: its wall time, the time inside the runner's forward (``runner.logits``, the function the hook wraps) and
inside the hook's wait, and the engine's steps. The summary gives each level's median of the per-repetition ratios
to level 0 (paired within a repetition, so the machine's drift cancels).

    PYTHONPATH=src OMP_NUM_THREADS=1 python studies/capacity-repeat/hook_inproc.py --levels 0,0.04,0.1 --reps 10 \
        --out studies/capacity-repeat/data/hook-inproc.json
    PYTHONPATH=src python studies/capacity-repeat/hook_inproc.py --summary studies/capacity-repeat/data/hook-inproc.json
"""

from __future__ import annotations

import contextlib
import json
import statistics
import time
from pathlib import Path

from hook_effect import study_args

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "fixtures" / "traffic" / "sustained_tenants.toml"
REFERENCE_LOAD = 64.0  # batchperf.capacity.search.REFERENCE_LOAD


def workloads(model):  # noqa: ANN001, ANN201 - a LoadedModel; the two settings' workloads
    from batchperf.workload.spec import LengthSpec, WorkloadSpec
    from batchperf.workload.traffic import TenantsKind

    base = WorkloadSpec(num_prompts=60, prompt_len=LengthSpec(64, 64), output_lens=(32,), seed=1)
    tenants = TenantsKind(base, FIXTURE, f"tenants:{FIXTURE}", REFERENCE_LOAD)
    return {"closed": base.build(model.vocab_size, model.max_model_len),
            "reference": tenants.build(model.vocab_size, model.max_model_len)}


def measure(levels: list[float], reps: int, out: Path) -> None:
    import torch

    from batchperf.backends import inject
    from batchperf.backends.continuous import ContinuousBackend
    from batchperf.suite.models import get_model_spec, load_model
    from batchperf.telemetry.sampler import Sampler

    torch.set_num_threads(1)
    model = load_model(get_model_spec("tiny-qwen2"))
    backend = ContinuousBackend(model)
    forward = backend.runner.logits  # the unhooked forward (no BATCHPERF_INJECT_* set: checked below)
    if getattr(forward, "__func__", None) is not type(backend.runner).logits:
        raise SystemExit("unset BATCHPERF_INJECT_SLOWDOWN / BATCHPERF_INJECT_DELAY_MS: this study sets the hook itself")
    loads = workloads(model)
    spent = {"forward": 0.0, "wait": 0.0, "steps": 0}

    def hooked(level: float):  # noqa: ANN202 - the runner's forward timed, and slowed as inject.slowed slows it
        def run(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            started = time.perf_counter()
            result = forward(*args, **kwargs)
            elapsed = time.perf_counter() - started
            spent["forward"] += elapsed
            spent["steps"] += 1
            if level:
                waited = time.perf_counter()
                inject.wait(inject.Injection(slowdown=level).extra_seconds(elapsed))
                spent["wait"] += time.perf_counter() - waited
            return result
        return run

    runs = []
    for setting, workload in loads.items():  # a warm-up run of each, discarded
        backend.runner.logits = hooked(0.0)
        backend.run(workload, 4, 64)
    for rep in range(reps):
        for setting, workload in loads.items():
            for level in (levels if rep % 2 == 0 else levels[::-1]):
                backend.runner.logits = hooked(level)
                spent.update(forward=0.0, wait=0.0, steps=0)
                sampler = Sampler() if setting == "reference" else contextlib.nullcontext()
                started = time.perf_counter()
                with sampler:
                    backend.run(workload, 4, 64)
                wall = time.perf_counter() - started
                runs.append({"rep": rep, "setting": setting, "level": level, "wall_s": wall, **spent})
                print(f"rep {rep + 1} {setting:9} hook {level:g}: wall {wall:.3f} s, forward {spent['forward']:.3f} "
                      f"s, wait {spent['wait']:.3f} s, {spent['steps']} steps", flush=True)
        out.write_text(json.dumps({"levels": levels, "runs": runs}, indent=1))


def summary(path: Path) -> None:
    data = json.loads(path.read_text())
    runs, levels = data["runs"], data["levels"]
    base = {(r["rep"], r["setting"]): r for r in runs if r["level"] == levels[0]}
    print("| setting | hook | wall vs 0 (median of paired ratios) | forward vs 0 | wait / forward | repetitions |")
    print("|---|--:|--:|--:|--:|--:|")
    for setting in dict.fromkeys(r["setting"] for r in runs):
        for level in levels[1:]:
            mine = [r for r in runs if r["setting"] == setting and r["level"] == level]
            wall = statistics.median(r["wall_s"] / base[r["rep"], setting]["wall_s"] for r in mine)
            fwd = statistics.median(r["forward"] / base[r["rep"], setting]["forward"] for r in mine)
            share = statistics.median(r["wait"] / r["forward"] for r in mine)
            print(f"| {setting} | {level:.0%} | {wall - 1:+.1%} | {fwd - 1:+.1%} | {share:.1%} | {len(mine)} |")


def main() -> None:
    given = study_args(__doc__, 10, summary)
    if given is not None:
        args, levels = given
        measure(levels, args.reps, args.out)
        summary(args.out)


if __name__ == "__main__":
    main()
