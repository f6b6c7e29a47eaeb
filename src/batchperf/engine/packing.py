"""One engine step's tokens as the index tensors the model runner's forward pass reads (``PackedStep``).

The scheduler hands the runner a list of :class:`~batchperf.engine.scheduler.Scheduled` items; ``PackedStep.build``
turns them, decode rows first, into one step's input ids, positions, KV write slots, the rows whose logits are
sampled, the decode rows' gather slots and additive mask, and each prompt's span. Torch is only touched at the end,
one tensor per field: the decode rows are packed with a fixed number of numpy calls whatever the batch
(tests/engine/test_model_runner.py counts a decode step's calls at batch 1, 4 and 24).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from batchperf.engine.scheduler import Scheduled


def _additive(keep: np.ndarray, device: Any, dtype: torch.dtype) -> torch.Tensor:
    """A boolean attention mask (True: attend) as the additive mask SDPA adds to the scores."""
    return torch.from_numpy(np.where(keep, 0.0, -np.inf).astype(np.float32)).to(device=device, dtype=dtype)


@dataclass(frozen=True, slots=True)
class PackedStep:
    """One step's index tensors, built once and read by every layer."""

    input_ids: torch.Tensor  # [T]
    positions: torch.Tensor  # [T]
    write_slots: torch.Tensor  # [T]: pool slot of each new token's K/V
    keep_rows: torch.Tensor  # [n]: the last row of each item that samples, in packed order
    num_decode: int
    decode_slots: torch.Tensor | None  # [B, L_max]: pool slots each decode row reads (masked past its length)
    decode_mask: torch.Tensor | None  # [B, 1, 1, L_max]: 0 where a key is real, -inf where it is padding
    decode_sampling: torch.Tensor | None  # decode rows that sample, when not all of them do
    prompts: list[tuple[int, int, torch.Tensor | None, torch.Tensor | None, bool]]  # start, end, slots, mask, samples
    lane_writes: torch.Tensor | None = None  # [num_decode]: each decode row's K/V slot in the lanes (``KVLanes``)
    lane_spans: tuple[tuple[int, int, int], ...] = ()  # (first row, first lane slot, rows) of each prompt in a lane
    dense: bool = False  # the decode rows sit in lanes 0 .. B-1 in order and all sample: their keys are a view
    rows: int = 0  # the rows with a token; a dense decode step padded to ``pad_to`` runs more (the rest are padding)
    # the masks are additive (0 / -inf), in the model's dtype, built once a step: SDPA turns a boolean mask into
    # that form on every call, which took 40% of a decode row's attention call (studies/continuous-step)

    @classmethod
    def build(cls, items: Sequence[Scheduled], block_size: int, device: Any,
              dtype: torch.dtype = torch.float32, lanes: Sequence[int] | None = None, lane_slots: int = 0,
              scratch_slot: int = 0, pad_to: int = 0) -> PackedStep:
        """Pack ``items``, decode rows (one new token each) first. The decode rows are packed with array
        operations only: no Python call per request, so a decode step's host work does not grow with the batch
        beyond reading each request's fields (tests/engine/test_model_runner.py counts it).

        ``lanes``: each item's lane in ``KVLanes`` (-1: none), whose lanes hold ``lane_slots`` positions each and
        whose ``scratch_slot`` takes the decode rows without one (a prompt without one is not written there). A
        step whose decode rows are ``dense`` gets no gather slots for them, and a dense step of decode rows only is
        padded to ``pad_to`` rows (token 0 at position 0; no K/V written, no attention computed), so that matmuls
        packed for that many rows take it whole."""
        num_decode = next((i for i, it in enumerate(items) if it.num_new != 1), len(items))
        dense = (lanes is not None and num_decode > 0 and list(lanes[:num_decode]) == list(range(num_decode))
                 and all([it.samples for it in items[:num_decode]]))
        decode = _DecodeRows.build(items[:num_decode], block_size, slots=not dense) if num_decode else None
        # Python lists until one tensor each: a decode step's few rows cost less so than as numpy arrays
        ids: list[int] = [] if decode is None else decode.ids
        positions: list[int] = [] if decode is None else decode.positions
        writes: list[int] = [] if decode is None else decode.writes
        keep_rows = [] if decode is None else decode.keep_rows
        if dense and num_decode == len(items) and pad_to > num_decode:
            ids, positions = ids + [0] * (pad_to - num_decode), positions + [0] * (pad_to - num_decode)
        prompts = []
        for item in items[num_decode:]:  # prompts and prompt chunks: each gets its own attention call anyway
            req, start = item.request, len(ids)
            if item.num_new == 1:
                raise ValueError("PackedStep.build: decode rows (one new token) must come before every prompt")
            first = req.num_cached
            ids.extend(req.tokens[first:first + item.num_new])
            pos = np.arange(first, first + item.num_new)
            table = np.asarray(req.block_table, dtype=np.int64)
            positions.extend(pos.tolist())
            writes.extend((table[pos // block_size] * block_size + pos % block_size).tolist())
            if item.samples:
                keep_rows.append(len(ids) - 1)
            if first == 0:
                prompts.append((start, len(ids), None, None, item.samples))
            else:
                total = first + item.num_new
                slots = (table[:, None] * block_size + _offsets(block_size)).reshape(-1)[:total]
                # query i (position first + i) sees keys 0..first + i
                mask = np.arange(total)[None, :] <= pos[:, None]
                prompts.append((start, len(ids), torch.from_numpy(slots).to(device),
                                _additive(mask, device, dtype), item.samples))

        def tensor(array: np.ndarray | None) -> torch.Tensor | None:
            return None if array is None else torch.from_numpy(array).to(device)

        return cls(
            input_ids=torch.tensor(ids, dtype=torch.long, device=device),
            positions=torch.tensor(positions, dtype=torch.long, device=device),
            write_slots=torch.tensor(writes, dtype=torch.long, device=device),
            keep_rows=torch.tensor(keep_rows, dtype=torch.long, device=device),
            num_decode=num_decode,
            decode_slots=tensor(None if decode is None else decode.slots),
            decode_mask=None if decode is None else _additive(decode.mask, device, dtype),
            decode_sampling=tensor(None if decode is None else decode.sampling),
            prompts=prompts,
            lane_writes=None if lanes is None else torch.tensor(
                [lane * lane_slots + it.request.num_cached if lane >= 0 else scratch_slot
                 for it, lane in zip(items[:num_decode], lanes[:num_decode])], dtype=torch.long, device=device),
            lane_spans=() if lanes is None else _lane_spans(items[num_decode:], lanes[num_decode:], num_decode,
                                                            lane_slots),
            dense=dense,
            rows=len(writes),
        )

    @property
    def keep_all(self) -> bool:
        """A dense step of decode rows only: every row is kept (one a request, padding after them), no gather."""
        return self.dense and not self.prompts


def _lane_spans(prompts: Sequence[Scheduled], lanes: Sequence[int], first_row: int,
                lane_slots: int) -> tuple[tuple[int, int, int], ...]:
    """Where each prompt (chunk) that holds a lane goes in it: its rows are consecutive positions (``KVLanes.write``
    copies each span as one slice)."""
    spans, row = [], first_row
    for item, lane in zip(prompts, lanes):
        if lane >= 0:
            spans.append((row, lane * lane_slots + item.request.num_cached, item.num_new))
        row += item.num_new
    return tuple(spans)


@dataclass(frozen=True, slots=True)
class _DecodeRows:
    """The decode rows of a step: B rows, one new token each, at position ``num_cached``."""

    ids: list[int]  # [B] the token each row feeds
    positions: list[int]  # [B]
    writes: list[int]  # [B] pool slot of each new token's K/V
    keep_rows: list[int]  # rows that sample
    slots: np.ndarray | None  # [B, L_max] pool slots each row reads (past a row's length: its blocks' or block 0's)
    mask: np.ndarray  # [B, 1, 1, L_max] True where a key is real
    sampling: np.ndarray | None  # rows that sample, when not all of them do

    @classmethod
    def build(cls, items: Sequence[Scheduled], block_size: int, slots: bool = True) -> _DecodeRows:
        """``slots``: also the [B, L_max] pool slots the rows read (not needed when their keys are in lanes)."""
        # the only per-request work: reading each request's fields and slicing its block table (comprehensions,
        # no call per request); then a fixed number of numpy calls for the [B, L_max] slots and mask
        reqs = [it.request for it in items]
        positions = [r.num_cached for r in reqs]  # the new token's position
        ids = [r.tokens[c] for r, c in zip(reqs, positions)]
        writes = [r.block_table[c // block_size] * block_size + c % block_size for r, c in zip(reqs, positions)]
        L = max(positions) + 1
        read = None
        if slots:
            width = (L - 1) // block_size + 1
            pad = [0] * width  # each row's blocks, then block 0 up to the widest row
            tables = np.array([r.block_table[:c // block_size + 1] + pad[c // block_size + 1:]
                               for r, c in zip(reqs, positions)], dtype=np.int64)  # [B, width]
            read = np.ascontiguousarray(
                (tables[:, :, None] * block_size + _offsets(block_size)).reshape(len(reqs), -1)[:, :L])
        valid = np.arange(L)[None, :] <= np.array(positions)[:, None]
        keep = [i for i, it in enumerate(items) if it.samples]
        sampling = None if len(keep) == len(items) else np.array(keep, dtype=np.int64)
        return cls(ids, positions, writes, keep, read, valid[:, None, None, :], sampling)


@functools.cache
def _offsets(block_size: int) -> np.ndarray:
    """A block's slot offsets, ``np.arange(block_size)``, made once per block size (read-only)."""
    offsets = np.arange(block_size)
    offsets.flags.writeable = False
    return offsets
