#!/usr/bin/env python
"""continuous vs hf-static, side by side on the CPU cells; see docs/continuous.md.

    PYTHONPATH=src python tools/bench_continuous.py [--prompt-lens 512 --batch-sizes 8 --concurrency 16 ...]
"""

import argparse
import sys

from batchperf.suite import versus as sidebyside

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sidebyside.add_cli_args(parser)
    sys.exit(sidebyside.main(parser.parse_args()))
