"""Does the telemetry sampler at normal priority make the real-time client read late? (issue 39)

Interleaves, in one window, the vllm-server cell run as ``pytest perf_tests`` runs it (``tools/wire_capture.py``'s
``one_run``: the suite's round, the telemetry sampler included, against the wire) with the client as it was before
issue 39 (only the client's own threads real-time, the sampler left at normal priority: ``loop-only``) and as it is
(every Python thread of the process raised: ``all``), alternating which goes first per run.

    OMP_NUM_THREADS=1 PYTHONPATH=src python studies/wire/sampler_ab.py --runs 10 --concurrency 1 \\
        --json studies/wire/data/sampler_ab.json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import tempfile
import threading
from pathlib import Path

from batchperf.backends import realtime, vllm_server
from batchperf.suite.matrix import CellParams
from batchperf.suite.models import get_model_spec, load_model

REPO = Path(__file__).resolve().parents[2]


def tool():
    spec = importlib.util.spec_from_file_location("wire_capture_tool", REPO / "tools" / "wire_capture.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def loop_only() -> tuple[dict[int, tuple[int, int]] | None, str]:
    """The client before issue 39: its own thread raised, the process's other threads (the sampler) left alone."""
    previous, words = realtime.raise_thread()
    return (None if previous is None else {threading.get_native_id(): previous}), words


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--json", type=Path, required=True)
    args = parser.parse_args()
    wire = tool()
    os.environ.pop("BATCHPERF_SERVER_URL", None)
    backend = vllm_server.VLLMServerBackend(load_model(get_model_spec("tiny-qwen2")))
    cell = CellParams("cpu", "cpu", "tiny-qwen2", "vllm-server", str(args.batch_size), "64", str(args.concurrency),
                      "48", rounds=1, warmup_rounds=1, arrival="closed", output_lens="24").resolve()
    arms = {"all": vllm_server.raise_process_threads, "loop-only": loop_only}
    results = []
    try:
        port = int(backend.base_url(args.batch_size).rsplit(":", 1)[1])
        with tempfile.TemporaryDirectory(prefix="wire-") as tmp:
            for run in range(1, args.runs + 1):
                for arm in list(arms) if run % 2 else list(arms)[::-1]:
                    vllm_server.raise_process_threads = arms[arm]  # the arm under study, for this run only
                    try:
                        r = wire.one_run(backend, cell, 1, port, Path(tmp))
                    finally:
                        vllm_server.raise_process_threads = arms["all"]
                    r["run"], r["scheduling"], r["arm"] = run, "fifo", arm
                    results.append(r)
                    print(f"[{arm}] " + wire.line(run, r), flush=True)
                    args.json.write_text(json.dumps(results, indent=1))
    finally:
        backend.close()
    for arm in arms:
        mine = [r for r in results if r["arm"] == arm]
        misses = [r for r in mine if not r["within"]]
        print(f"[{arm}] {len(mine) - len(misses)} of {len(mine)} within 5%; {len(misses)} missed, "
              f"{sum(r['client_bound'] for r in misses)} of them marked; "
              f"{sum(bool(r['stalls']) for r in mine)} run(s) with a stall > 10 ms in flight", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
