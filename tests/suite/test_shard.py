"""Sharding: every cell in exactly one shard, stable across processes; the option's validation."""

import json
import os
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from batchperf.suite.matrix import TIERS
from batchperf.suite.shard import Shard, select, shard_of

cell_ids = st.lists(st.text(min_size=1, max_size=40), max_size=60, unique=True)


@given(ids=cell_ids, count=st.integers(min_value=1, max_value=16))
def test_every_cell_is_in_exactly_one_shard(ids: list[str], count: int) -> None:
    shards = [select(ids, Shard(i, count)) for i in range(1, count + 1)]
    flat = [c for s in shards for c in s]
    assert sorted(flat) == sorted(ids)  # nothing lost, nothing twice


@given(ids=cell_ids, count=st.integers(min_value=1, max_value=16), extra=st.lists(st.text(min_size=1), max_size=10))
def test_a_cells_shard_depends_on_its_id_alone(ids: list[str], count: int, extra: list[str]) -> None:
    before = {c: shard_of(c, count) for c in ids}
    after = {c: shard_of(c, count) for c in [*extra, *reversed(ids)]}  # other cells added, order changed
    assert all(after[c] == before[c] for c in ids)


def test_shards_are_stable_across_processes() -> None:
    # Python's hash() of a str changes per process (PYTHONHASHSEED); the shard must not.
    ids = [c.id for c in TIERS["gpu"].cells()]
    code = ("import sys, json; from batchperf.suite.shard import shard_of; "
            "print(json.dumps([shard_of(c, 4) for c in json.loads(sys.stdin.read())]))")
    runs = [
        subprocess.run([sys.executable, "-c", code], input=json.dumps(ids), capture_output=True,
                       text=True, check=True, env={**os.environ, "PYTHONHASHSEED": seed}).stdout
        for seed in ("1", "2")
    ]
    assert runs[0] == runs[1] == json.dumps([shard_of(c, 4) for c in ids]) + "\n"


def test_the_default_gpu_matrix_spreads_over_shards() -> None:
    ids = [c.id for c in TIERS["gpu"].cells()]
    sizes = [len(select(ids, Shard(i, 4))) for i in range(1, 5)]
    assert sum(sizes) == len(ids) and min(sizes) >= len(ids) // 8  # a hash, not a balanced split, but not lopsided


@pytest.mark.parametrize(("text", "message"), [
    ("3", "bad shard '3'; use I/N"),
    ("a/b", "bad shard 'a/b'; use I/N"),
    ("0/2", "shard index must be between 1 and 2, got 0"),
    ("3/2", "shard index must be between 1 and 2, got 3"),
    ("1/0", "shard count must be >= 1, got 0"),
])
def test_bad_shards_are_named(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Shard.parse(text)


def test_shard_parses_and_prints() -> None:
    assert Shard.parse(" 2/4 ") == Shard(2, 4) and str(Shard(2, 4)) == "2/4"
