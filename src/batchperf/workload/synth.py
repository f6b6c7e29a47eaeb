"""Seeded token ids for the traffic workloads (:mod:`.traffic`, :mod:`.tenants`), and the context check they share."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from batchperf.workload.replay import MOONCAKE_BLOCK_SIZE, TraceRow

# What memory holds: a workload's prompts are tuples of Python ints (~36 bytes a token), so 2**26 prompt tokens
# are ~2.4 GB; a million requests is more than any cell sends (the GPU tier sends 256).
MAX_REQUESTS = 1_000_000
MAX_WORKLOAD_TOKENS = 1 << 26


def check_memory(requests: int, tokens: int, where: str) -> None:
    """Refuse, before any token is made, a workload of more requests or prompt tokens than memory holds."""
    if requests > MAX_REQUESTS:
        raise ValueError(f"{where}: {requests:,} requests; a cell holds at most {MAX_REQUESTS:,} (requests within "
                         f"what memory holds): send fewer, or cut a trace with window=A-B")
    if tokens > MAX_WORKLOAD_TOKENS:
        raise ValueError(f"{where}: up to {tokens:,} prompt tokens; a cell holds at most {MAX_WORKLOAD_TOKENS:,} "
                         f"(requests within what memory holds, ~36 bytes a token): send fewer or shorter requests")


class TokenSynth:
    """Seeded token ids: a block per hash id (equal ids, equal blocks) and distinct prompts per key.

    Only the tokens a prompt uses are made: a block's first n tokens are the same whatever n (the generator
    draws them in order), so ``block=10000000`` costs what its prompts hold, not ten million tokens per id."""

    def __init__(self, seed: int, vocab_size: int, first_token_id: int = 0, block_size: int = MOONCAKE_BLOCK_SIZE):
        if vocab_size - first_token_id < 2:
            raise ValueError(f"vocabulary range [{first_token_id}, {vocab_size}) is too small for prompts")
        self.seed, self.low, self.high, self.block_size = seed, first_token_id, vocab_size, block_size
        self._blocks: dict[int, tuple[int, ...]] = {}

    def tokens(self, stream: int, key: int, n: int) -> tuple[int, ...]:
        rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([self.seed, stream, key])))
        return tuple(int(t) for t in rng.integers(self.low, self.high, size=n))

    def block(self, hash_id: int, n: int) -> tuple[int, ...]:
        """The first ``n`` (<= block_size) tokens of ``hash_id``'s block."""
        known = self._blocks.get(hash_id, ())
        if len(known) < n:
            known = self._blocks[hash_id] = self.tokens(1, hash_id % 2**63, n)
        return known[:n]

    def prompt(self, row: TraceRow) -> tuple[int, ...]:
        if row.hash_ids is None:
            return self.tokens(2, row.line, row.input_length)
        size = self.block_size
        return tuple(t for k, h in enumerate(row.hash_ids)
                     for t in self.block(h, min(size, row.input_length - k * size)))


def check_fits(prompt_len: int, output_len: int, max_model_len: int, where: str) -> None:
    if prompt_len + output_len > max_model_len:
        raise ValueError(f"{where}: prompt of {prompt_len} + {output_len} output tokens = {prompt_len + output_len} "
                         f"exceeds the model's context of {max_model_len} tokens")


def file_stem(path: Path) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", path.stem)[:24] or "trace"
