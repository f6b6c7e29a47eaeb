"""How a decode step of the CPU tier's tiny model splits between the forward pass and the rest.

Prints, per batch size and prompt length, the median time of one `generate` decode step (gaps
between streamed tokens) and of one bare forward pass with a KV cache, measured side by side in one process. The tiny model is sized so the
forward pass is most of a step (Python outside the forward is the small remainder).

    .venv/bin/python tools/step_profile.py [--steps 32]
"""

from __future__ import annotations

import argparse
import statistics
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=32)
    args = parser.parse_args()

    import torch

    from batchperf.suite.models import get_model_spec, load_model

    loaded = load_model(get_model_spec("tiny-qwen2"))
    model = loaded.model
    print(f"{'batch':>5} {'prompt':>6} {'generate step ms':>17} {'forward ms':>11} {'forward share':>14}")
    for batch, prompt in [(1, 64), (4, 64), (8, 64), (8, 512)]:
        ids = torch.randint(1, loaded.vocab_size, (batch, prompt))
        kwargs = dict(attention_mask=torch.ones_like(ids), do_sample=False, pad_token_id=0)
        stamps = _Stamps()
        with torch.inference_mode():
            model.generate(ids, max_new_tokens=4, min_new_tokens=4, **kwargs)  # warm-up
            model.generate(ids, max_new_tokens=args.steps + 1, min_new_tokens=args.steps + 1, streamer=stamps, **kwargs)
            step = statistics.median(b - a for a, b in zip(stamps.times, stamps.times[1:]))
            cache = model(ids, use_cache=True).past_key_values
            token = ids[:, -1:]
            times = []
            for _ in range(args.steps):
                t = time.perf_counter()
                cache = model(token, past_key_values=cache, use_cache=True).past_key_values
                times.append(time.perf_counter() - t)
            forward = statistics.median(times)
        print(f"{batch:>5} {prompt:>6} {step * 1e3:>17.2f} {forward * 1e3:>11.2f} {forward / step:>14.0%}")


class _Stamps:
    """A generate streamer: the time each decode step's tokens exist (the first put is the prompt)."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self._prompt_seen = False

    def put(self, value: object) -> None:
        if self._prompt_seen:
            self.times.append(time.perf_counter())
        self._prompt_seen = True

    def end(self) -> None:
        pass


if __name__ == "__main__":
    main()
