"""``batchperf models``: what the suite can run."""

from __future__ import annotations

import argparse

from batchperf.backends import backend_names
from batchperf.suite.matrix import TIERS
from batchperf.suite.models import MODELS


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    del parser  # no options


def main(args: argparse.Namespace) -> int:
    print("models:")
    for spec in MODELS.values():
        weights = "  dummy weights from the shipped config" if spec.weights == "dummy" else ""
        print(f"  {spec.name:<14} {spec.tier} tier  {spec.dtype:<9} {spec.source:<28}{weights}"
              f"{'  (opt-in)' if spec.opt_in else ''}")
    print("backends: " + ", ".join(backend_names()))
    for tier in TIERS.values():
        print(f"tier {tier.name}: models {','.join(tier.models)}; backends {','.join(tier.backends)}; "
              f"batch sizes {','.join(tier.batch_sizes)}; prompt lengths {','.join(tier.prompt_lens)}; "
              f"concurrency {','.join(tier.concurrency)}; {tier.num_prompts} requests × {tier.rounds} rounds per cell")
    return 0
