"""How a decode step of a CPU model (the tiny one by default) splits between the forward pass and the rest.

Prints, per batch size and prompt length, the median time of one `generate` decode step (gaps
between streamed tokens) and of one bare forward pass with a KV cache, measured side by side in one process. The tiny
model is sized so the forward pass is most of a step (Python outside the forward is the small remainder). With
``--batches``, every batch size is measured at every ``--prompt-lens`` length (64 unless given); without it, the tiny
model's four reference cases. How the step grows with the batch, for the policy study's small model:

    OMP_NUM_THREADS=1 .venv/bin/python studies/continuous-step/step_profile.py --model small-qwen2 --batches 1,2,4,8,16
    .venv/bin/python studies/continuous-step/step_profile.py [--steps 32] [--model NAME] [--batches 1,4] [--prompt-lens 64,512]
"""

from __future__ import annotations

import argparse
import statistics
import time

DEFAULT_CASES = ((1, 64), (4, 64), (8, 64), (8, 512))


def _sizes(text: str) -> tuple[int, ...]:
    """``"1,2,4"`` -> ``(1, 2, 4)``: positive integers, or an argparse error naming the bad entry."""
    try:
        sizes = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give positive integers separated by commas, e.g. 1,2,4") from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give positive integers separated by commas, e.g. 1,2,4")
    return sizes


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line; ``cases`` is the (batch, prompt length) pairs to measure, in order."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=32, help="decode steps timed per case (default 32)")
    parser.add_argument("--model", default="tiny-qwen2", help="a registered model (batchperf models; default "
                        "tiny-qwen2), loaded on the CPU as the suite loads it")
    parser.add_argument("--batches", type=_sizes, help="batch sizes, e.g. 1,2,4,8,16 (default: the tiny model's "
                        "reference cases 1/64, 4/64, 8/64, 8/512)")
    parser.add_argument("--prompt-lens", type=_sizes, help="prompt lengths measured at every batch size "
                        "(default 64; with --batches only)")
    args = parser.parse_args(argv)
    if args.prompt_lens and not args.batches:
        parser.error("--prompt-lens needs --batches (the default cases fix their prompt lengths)")
    if args.batches:
        args.cases = tuple((b, p) for b in args.batches for p in (args.prompt_lens or (64,)))
    else:
        args.cases = DEFAULT_CASES
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)

    import torch

    from batchperf.suite.models import get_model_spec, load_model

    loaded = load_model(get_model_spec(args.model))
    model = loaded.model
    print(f"{args.model}, torch threads {torch.get_num_threads()}")
    print(f"{'batch':>5} {'prompt':>6} {'generate step ms':>17} {'forward ms':>11} {'forward share':>14}")
    for batch, prompt in args.cases:
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
