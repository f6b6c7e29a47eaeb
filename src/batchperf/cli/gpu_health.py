"""``batchperf gpu-health``: the GPUs' state before a nightly run, as JSON beside the results, warnings printed."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, required=True, help="JSON file to write")


def main(args: argparse.Namespace) -> int:
    from batchperf.telemetry.gpu_health import collect

    health = collect()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(health, indent=2) + "\n")
    what = health.get("reason") or f"{len(health['gpus'])} GPU(s)"
    print(f"batchperf gpu-health: {what} -> {args.out}")
    for line in health["warnings"]:
        print(f"warning: {line}")
    return 0
