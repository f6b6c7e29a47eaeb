"""A fake model for the engine tests: a deterministic next token, and a runner that checks the KV pool by hand."""

from __future__ import annotations

from batchperf.engine.block_manager import BlockManager
from batchperf.engine.request import Request
from batchperf.engine.scheduler import Scheduled


def next_token(tokens: list[int]) -> int:
    """The fake model: a deterministic function of the whole context, as a real one is."""
    return (sum((i + 1) * t for i, t in enumerate(tokens)) * 2654435761) % 1000


def reference(request: Request) -> list[int]:
    tokens = list(request.prompt_ids)
    for _ in range(request.target_len):
        tokens.append(next_token(tokens))
    return tokens[request.prompt_len:]


class FakeRunner:
    """Writes (request, position, token) into pool slots and reads back every cached one, so a block
    handed to two requests at once, or a stale cache after preemption, fails the run."""

    def __init__(self, blocks: BlockManager) -> None:
        self.blocks = blocks
        self.slots: dict[int, tuple[int, int, int]] = {}
        self.steps: list[list[Scheduled]] = []

    def slot(self, request: Request, position: int) -> int:
        size = self.blocks.block_size
        return request.block_table[position // size] * size + position % size

    def run(self, step: list[Scheduled]) -> list[int | None]:
        self.steps.append(step)
        out: list[int | None] = []
        for item in step:
            req = item.request
            end = req.num_cached + item.num_new
            assert len(req.block_table) * self.blocks.block_size >= end, "blocks do not cover the tokens"
            for pos in range(req.num_cached, end):
                self.slots[self.slot(req, pos)] = (req.request_id, pos, req.tokens[pos])
            context = [self.slots[self.slot(req, pos)] for pos in range(end)]
            assert context == [(req.request_id, pos, req.tokens[pos]) for pos in range(end)], "KV corrupted"
            out.append(next_token(req.tokens) if item.samples else None)
        return out
