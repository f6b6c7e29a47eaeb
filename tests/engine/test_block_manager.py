"""Block bookkeeping of the paged KV store, and Request validation."""

from __future__ import annotations

import pytest

from batchperf.engine.block_manager import BlockManager, blocks_for
from batchperf.engine.request import Request


@pytest.mark.parametrize(("tokens", "size", "blocks"), [(0, 16, 0), (1, 16, 1), (16, 16, 1), (17, 16, 2), (5, 1, 5)])
def test_blocks_for_rounds_up_to_whole_blocks(tokens, size, blocks):
    assert blocks_for(tokens, size) == blocks


def test_block_manager_counts_blocks_and_bytes():
    blocks = BlockManager(4, 16, bytes_per_block=1000)
    request = Request(0, (1,) * 20, 5)
    blocks.reserve(request, 20)
    assert request.block_table == [0, 1] and blocks.bytes_in_use == 2000 and blocks.num_free == 2
    blocks.reserve(request, 32)  # still two blocks
    assert blocks.num_used == 2 and request.peak_tokens == 32
    with pytest.raises(RuntimeError, match="needs 3 KV blocks, only 2 free"):
        blocks.reserve(request, 32 + 16 * 3)
    request.num_cached = 20
    blocks.release(request)
    assert blocks.num_free == 4 and request.block_table == [] and request.num_cached == 0
    assert blocks.peak_used == 2 and request.peak_blocks == 2


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"num_blocks": 0, "block_size": 4}, "num_blocks"),
    ({"num_blocks": 1, "block_size": 0}, "block_size"),
    ({"num_blocks": 1, "block_size": 1, "bytes_per_block": -1}, "bytes_per_block"),
])
def test_block_manager_validation(kwargs, message):
    with pytest.raises(ValueError, match=message):
        BlockManager(**kwargs)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"prompt_ids": (), "target_len": 1}, "prompt_ids is empty"),
    ({"prompt_ids": (1,), "target_len": 0}, "target_len"),
])
def test_request_validation(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Request(0, **kwargs)
