"""Sharding the cells across GPUs and runners: ``--batchperf-shard=I/N`` keeps a stable subset.

A cell belongs to shard ``sha256(cell id) mod N`` (shards are numbered 1..N on
the command line). The hash depends on the id alone, never on which other
cells exist, on the order of collection or on Python's per-process ``hash()``
seed, so a cell lands in the same shard every night on every runner, and the
shards of one run partition the matrix exactly.

One shard is one pytest process; on a machine with several GPUs run one
process per GPU, each pinned with ``CUDA_VISIBLE_DEVICES`` (see docs/nightly.md),
so two cells never share a GPU. pytest-xdist is not an option: pytest-benchmark
disables itself whenever xdist is active.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pytest

from batchperf.suite.matrix import cell_id

USAGE = "use I/N with 1 <= I <= N, e.g. --batchperf-shard=2/4 for the second of four shards"


@dataclass(frozen=True, slots=True)
class Shard:
    index: int  # 1-based, as written on the command line
    count: int

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ValueError(f"shard count must be >= 1, got {self.count}; {USAGE}")
        if not 1 <= self.index <= self.count:
            raise ValueError(f"shard index must be between 1 and {self.count}, got {self.index}; {USAGE}")

    @classmethod
    def parse(cls, text: str) -> Shard:
        index, sep, count = text.strip().partition("/")
        try:
            numbers = int(index), int(count)
        except ValueError:
            numbers = None
        if not sep or numbers is None:
            raise ValueError(f"bad shard {text!r}; {USAGE}")
        try:
            return cls(*numbers)
        except ValueError as exc:
            raise ValueError(f"bad shard {text!r}: {exc}") from None

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    def holds(self, cell_id: str) -> bool:
        return shard_of(cell_id, self.count) == self.index


def shard_of(cell_id: str, count: int) -> int:
    """The 1-based shard of ``cell_id`` among ``count`` shards (stable across processes and machines)."""
    if count < 1:
        raise ValueError(f"shard count must be >= 1, got {count}")
    digest = hashlib.sha256(cell_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % count + 1


def select(cell_ids: Iterable[str], shard: Shard) -> list[str]:
    return [c for c in cell_ids if shard.holds(c)]


# --- pytest wiring (loaded by batchperf.suite.plugin through ``pytest_plugins``) ---

SHARD = pytest.StashKey["Shard | None"]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("batchperf").addoption(
        "--batchperf-shard", dest="batchperf_shard", default=None, metavar="I/N",
        help="run only shard I of N (a stable subset of the cells, by a hash of the cell id); "
             "one pytest process per GPU, pinned with CUDA_VISIBLE_DEVICES")


def pytest_configure(config: pytest.Config) -> None:
    raw = config.getoption("batchperf_shard", None)
    try:
        config.stash[SHARD] = Shard.parse(raw) if raw else None
    except ValueError as exc:
        raise pytest.UsageError(f"--batchperf-shard: {exc}") from None


def pytest_collection_modifyitems(config: pytest.Config, items: list[Any]) -> None:
    shard = config.stash.get(SHARD, None)
    if shard is None:
        return
    # Only cells are sharded; the KV-growth check (batchperf.suite.kv_check) is added after this, in every shard.
    keep, dropped = [], []
    for item in items:
        cid = cell_id(item)
        (keep if cid is None or shard.holds(cid) else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


def pytest_report_header(config: pytest.Config) -> str | None:
    shard = config.stash.get(SHARD, None)
    return f"batchperf: shard {shard} (cells by sha256 of their id)" if shard else None
