"""Every ``BATCHPERF_*`` environment variable the package reads, one line each; users import the name from here.

They live in ``launch`` because most of them are how one batchperf process tells another (its child pytest, a
side of an A/B, a kept server) what to do, and because every stage that reads one may import ``launch``. The CI
scripts have variables of their own (``BATCHPERF_PYTHON``, ``BATCHPERF_HISTORY``, ``BATCHPERF_PUSHGATEWAY``:
``ci/nightly.sh``), which no Python code reads.
"""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "BATCHPERF_CACHE"  # a folder for the tiny CPU model and the signed-rank level cache (~/.cache/batchperf)
CLIENT_REALTIME_ENV = "BATCHPERF_CLIENT_REALTIME"  # 0: the client's sender thread stays at normal scheduling
INJECT_PREFIX = "BATCHPERF_INJECT_"  # every injection variable starts so; the fingerprint records the ones set
INJECT_SLOWDOWN_ENV = "BATCHPERF_INJECT_SLOWDOWN"  # wait this fraction of each forward pass after it (docs/ab.md)
INJECT_DELAY_MS_ENV = "BATCHPERF_INJECT_DELAY_MS"  # wait this many ms after each forward pass
PHASES_ENV = "BATCHPERF_PHASES"  # a file the phases plugin writes a child pytest's phase timings to
ROUND_GATE_ENV = "BATCHPERF_ROUND_GATE"  # the Unix socket of ab's round coordinator (the resident design)
KEEP_SERVERS_ENV = "BATCHPERF_KEEP_SERVERS"  # the folder of the servers kept across processes (ab --keep-servers)
KEEP_SERVERS_OWNER_ENV = "BATCHPERF_KEEP_SERVERS_OWNER"  # the pid the kept servers end with
SERVER_URL_ENV = "BATCHPERF_SERVER_URL"  # a running server (URL or BATCH_SIZE=URL, comma-separated)
SERVER_READY_TIMEOUT_ENV = "BATCHPERF_SERVER_READY_TIMEOUT"  # seconds a started server may take to answer (600)
REQUEST_TIMEOUT_ENV = "BATCHPERF_REQUEST_TIMEOUT"  # seconds one request may take (--batchperf-request-timeout)
METRICS_SAMPLE_S_ENV = "BATCHPERF_METRICS_SAMPLE_S"  # how often a server's /metrics is sampled, in s (0.5; 0: never)
BASELINE_PYTHON_ENV = "BATCHPERF_BASELINE_PYTHON"  # the baseline environment's python, for the gate's ab hint


def cache_root() -> Path:
    """``$BATCHPERF_CACHE``, else ``~/.cache/batchperf``."""
    return Path(os.environ.get(CACHE_ENV, Path.home() / ".cache" / "batchperf"))
