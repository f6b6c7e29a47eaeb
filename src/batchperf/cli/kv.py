"""``batchperf kv --config config.json``: KV-cache bytes per token and per request from a model config."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from batchperf.measure.kv import KVShape, kv_bytes_per_request


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, type=Path, help="a model's config.json (or its folder)")
    parser.add_argument("--dtype", default="float16", help="KV-cache dtype (default: float16)")
    parser.add_argument("--prompt-len", type=int, default=512)
    parser.add_argument("--output-len", type=int, default=32)
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")


@dataclass(frozen=True, slots=True)
class KVReport:
    layers: int
    kv_heads: int
    head_dim: int
    dtype: str
    bytes_per_token: int
    prompt_len: int
    output_len: int
    bytes_per_request: int


def main(args: argparse.Namespace) -> int:
    path = args.config / "config.json" if args.config.is_dir() else args.config
    try:
        config = json.loads(path.read_text())
    except FileNotFoundError:
        raise SystemExit(f"batchperf kv: {path}: no such file; pass a model's config.json or its folder")
    except json.JSONDecodeError as exc:
        raise SystemExit(f"batchperf kv: {path} is not valid JSON ({exc}); pass a model's config.json")
    try:
        shape = KVShape.from_config(config)
        report = KVReport(
            shape.layers, shape.kv_heads, shape.head_dim, args.dtype, shape.bytes_per_token(args.dtype),
            args.prompt_len, args.output_len,
            kv_bytes_per_request(config, args.dtype, args.prompt_len, args.output_len),
        )
    except ValueError as exc:
        raise SystemExit(f"batchperf kv: {path}: {exc}")
    if args.json:
        print(json.dumps(asdict(report)))
    else:
        print(f"{path}: {report.layers} layers × {report.kv_heads} KV heads × head_dim {report.head_dim}, {args.dtype}")
        print(f"KV bytes per token:   {report.bytes_per_token:,} (2 × layers × kv_heads × head_dim × dtype bytes)")
        print(f"KV bytes per request: {report.bytes_per_request:,} "
              f"({args.prompt_len} prompt + {args.output_len} output tokens; "
              f"{report.bytes_per_request / 2**20:.2f} MiB)")
    return 0
