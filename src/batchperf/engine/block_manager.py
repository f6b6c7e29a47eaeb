"""The paged KV store's bookkeeping: fixed-size blocks, a free list, a block table per request.

Pure Python. The tensors of the pool live in the model runner
(``[layers, 2, num_blocks, block_size, kv_heads, head_dim]``); this class only
decides which block holds what. Token ``i`` of a request lives in block
``block_table[i // block_size]`` at offset ``i % block_size``. Bytes in use are
whole blocks, so a request's measured KV exceeds the analytic per-token figure
by less than one block.
"""

from __future__ import annotations

from collections import deque

from batchperf.engine.request import Request


def blocks_for(num_tokens: int, block_size: int) -> int:
    return -(-num_tokens // block_size)


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int, bytes_per_block: int = 0) -> None:
        if num_blocks < 1:
            raise ValueError(f"num_blocks must be >= 1, got {num_blocks}")
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1 token, got {block_size}")
        if bytes_per_block < 0:
            raise ValueError(f"bytes_per_block must be >= 0, got {bytes_per_block}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.bytes_per_block = bytes_per_block
        self._free: deque[int] = deque(range(num_blocks))
        self.peak_used = 0

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_used(self) -> int:
        return self.num_blocks - len(self._free)

    @property
    def bytes_in_use(self) -> int:
        return self.num_used * self.bytes_per_block

    def blocks_needed(self, request: Request, num_tokens: int) -> int:
        """Blocks ``request`` must gain to hold K/V for its first ``num_tokens`` tokens."""
        return max(blocks_for(num_tokens, self.block_size) - len(request.block_table), 0)

    def can_hold(self, request: Request, num_tokens: int) -> bool:
        return self.blocks_needed(request, num_tokens) <= len(self._free)

    def reserve(self, request: Request, num_tokens: int) -> None:
        """Grow ``request``'s block table to hold ``num_tokens`` tokens; the caller checked ``can_hold``."""
        need = self.blocks_needed(request, num_tokens)
        if need > len(self._free):
            raise RuntimeError(
                f"request {request.request_id} needs {need} KV blocks, only {len(self._free)} free; "
                "the scheduler must check can_hold first"
            )
        request.block_table.extend(self._free.popleft() for _ in range(need))
        request.peak_blocks = max(request.peak_blocks, len(request.block_table))
        request.peak_tokens = max(request.peak_tokens, num_tokens)
        self.peak_used = max(self.peak_used, self.num_used)

    def release(self, request: Request) -> None:
        """Return every block of ``request`` to the free list; its cached K/V is gone."""
        self._free.extend(request.block_table)
        request.block_table.clear()
        request.num_cached = 0
