#!/usr/bin/env python
"""Thin wrapper for `batchperf refresh` (the logic lives in batchperf.regress.refresh)."""

from __future__ import annotations

import argparse

from batchperf.cli import refresh

if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="refresh_baselines.py", description=refresh.__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    refresh.add_cli_args(parser)
    raise SystemExit(refresh.main(parser.parse_args()))
