"""How a decode step of the CPU tier's tiny model splits between the forward pass and the rest.

Prints, per batch size and prompt length, the time of one `generate` decode step and of the bare
forward pass it contains, measured side by side in one process. The tiny model is sized so the
forward pass is most of a step (Python outside the forward is the small remainder).

    .venv/bin/python tools/step_profile.py [--steps 32]
"""

from __future__ import annotations

import argparse
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=32)
    args = parser.parse_args()

    import torch

    from batchperf.models import get_model_spec, load_model

    loaded = load_model(get_model_spec("tiny-qwen2"))
    model = loaded.model
    print(f"{'batch':>5} {'prompt':>6} {'generate step ms':>17} {'forward ms':>11} {'forward share':>14}")
    for batch, prompt in [(1, 64), (4, 64), (8, 64), (8, 512)]:
        ids = torch.randint(1, loaded.vocab_size, (batch, prompt))
        kwargs = dict(attention_mask=torch.ones_like(ids), do_sample=False, pad_token_id=0)
        with torch.inference_mode():
            model.generate(ids, max_new_tokens=4, min_new_tokens=4, **kwargs)  # warm-up
            t = time.perf_counter()
            model.generate(ids, max_new_tokens=1, min_new_tokens=1, **kwargs)
            prefill = time.perf_counter() - t
            t = time.perf_counter()
            model.generate(ids, max_new_tokens=args.steps + 1, min_new_tokens=args.steps + 1, **kwargs)
            step = (time.perf_counter() - t - prefill) / args.steps
            cache = model(ids, use_cache=True).past_key_values
            token = ids[:, -1:]
            t = time.perf_counter()
            for _ in range(args.steps):
                cache = model(token, past_key_values=cache, use_cache=True).past_key_values
            forward = (time.perf_counter() - t) / args.steps
        print(f"{batch:>5} {prompt:>6} {step * 1e3:>17.2f} {forward * 1e3:>11.2f} {forward / step:>14.0%}")


if __name__ == "__main__":
    main()
