"""Seeded token ids for the traffic workloads (:mod:`.traffic`, :mod:`.tenants`), and the context check they share."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from batchperf.workload.replay import MOONCAKE_BLOCK_SIZE, TraceRow


class TokenSynth:
    """Seeded token ids: a block per hash id (equal ids, equal blocks) and distinct prompts per key."""

    def __init__(self, seed: int, vocab_size: int, first_token_id: int = 0, block_size: int = MOONCAKE_BLOCK_SIZE):
        if vocab_size - first_token_id < 2:
            raise ValueError(f"vocabulary range [{first_token_id}, {vocab_size}) is too small for prompts")
        self.seed, self.low, self.high, self.block_size = seed, first_token_id, vocab_size, block_size
        self._blocks: dict[int, tuple[int, ...]] = {}

    def tokens(self, stream: int, key: int, n: int) -> tuple[int, ...]:
        rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([self.seed, stream, key])))
        return tuple(int(t) for t in rng.integers(self.low, self.high, size=n))

    def block(self, hash_id: int) -> tuple[int, ...]:
        if hash_id not in self._blocks:
            self._blocks[hash_id] = self.tokens(1, hash_id % 2**63, self.block_size)
        return self._blocks[hash_id]

    def prompt(self, row: TraceRow) -> tuple[int, ...]:
        if row.hash_ids is None:
            return self.tokens(2, row.line, row.input_length)
        return tuple(t for h in row.hash_ids for t in self.block(h))[:row.input_length]


def check_fits(prompt_len: int, output_len: int, max_model_len: int, where: str) -> None:
    if prompt_len + output_len > max_model_len:
        raise ValueError(f"{where}: prompt of {prompt_len} + {output_len} output tokens = {prompt_len + output_len} "
                         f"exceeds the model's context of {max_model_len} tokens")


def file_stem(path: Path) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", path.stem)[:24] or "trace"
