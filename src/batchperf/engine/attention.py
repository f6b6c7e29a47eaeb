"""The attention of one engine step: the decode rows against their lanes or the pool, each prompt causally.

The model runner packs a step's tokens (``PackedStep``) and runs every matmul once over all of them; attention is
per request, and :class:`StepAttention` does it for one layer:

- **decode rows** (one new token each) share ONE SDPA call, the query heads of a KV head folded into the query
  axis (``[B, kv_heads, group, head_dim]``, so grouped-query attention repeats no keys). Where the step is
  ``dense`` (its decode rows sit in lanes ``0 .. B-1``, :mod:`batchperf.engine.lanes`) the keys and values are
  views of the lanes; otherwise they are gathered from the pool through the block tables, padded and masked;
- **a prompt** (or prompt chunk) gets its own causal call: a whole prompt attends to its fresh K/V, a later chunk
  to its gathered blocks. On the CPU a whole prompt runs ``PROMPT_ROWS`` queries at a time, each block against the
  keys up to its last query: torch's CPU flash kernel takes as long causal as not, so one call would compute every
  key for every query.

Each part is written once into the ``[rows, heads * head_dim]`` output the output projection reads.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from batchperf.engine.lanes import KVLanes
from batchperf.engine.packing import PackedStep

# on the CPU a whole prompt's causal attention runs this many queries at a time (4 x 64 for a 256-token prompt:
# 0.84x its time, the same values; 32: 0.87x, 128: 0.90x)
PROMPT_ROWS = 64
MASKS_KEPT = 1024  # the blocks' masks are kept for prompts up to this many tokens (2.2 MB in float32)


class StepAttention:
    """One layer's attention for a packed step, for a model of ``heads`` query heads on ``kv_heads`` of ``head_dim``."""

    def __init__(self, heads: int, kv_heads: int, head_dim: int, device: torch.device, dtype: torch.dtype) -> None:
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.device, self.dtype = device, dtype
        self._block_masks: dict[tuple[int, int], torch.Tensor] = {}  # block_mask's, by (first query, end)

    def __call__(self, p: PackedStep, q: torch.Tensor, kv: torch.Tensor, k_cache: torch.Tensor,
                 v_cache: torch.Tensor, lanes: KVLanes | None, layer: int, sampled_only: bool = False) -> torch.Tensor:
        """Attention output ``[rows, H * D]`` of every row, or with ``sampled_only`` of ``p.keep_rows``: ``q``
        ``[T, H * D]``, ``kv`` the step's new K and V ``[rows, 2, KVH, D]``, ``k_cache``/``v_cache`` the pool's
        ``[slots, KVH, D]`` of this ``layer``; where ``p.dense`` the decode rows read ``lanes``. Each part (the
        decode rows, each prompt) is written once into the output."""
        H, KVH, D = self.heads, self.kv_heads, self.head_dim
        T = q.shape[0]
        if p.keep_all:  # a dense step of decode rows only: one SDPA call is the output (padding rows: zeros)
            B = p.num_decode
            out = self.lane_attention(q if B == T else q.narrow(0, 0, B), p.decode_mask, lanes, layer)
            return out if B == T else F.pad(out, (0, 0, 0, T - B))
        out = q.new_empty(p.keep_rows.shape[0] if sampled_only else T, H, D)
        at = 0
        if p.dense:  # the decode rows sit in lanes 0 .. B-1, and all sample
            at = p.num_decode
            out[:at] = self.lane_attention(q.narrow(0, 0, at), p.decode_mask, lanes, layer).view(at, H, D)
        elif p.num_decode:
            rows, slots, mask = slice(0, p.num_decode), p.decode_slots, p.decode_mask
            if sampled_only and p.decode_sampling is not None:  # a 1-token prompt chunk that does not sample
                rows, slots, mask = p.decode_sampling, slots[p.decode_sampling], mask[p.decode_sampling]
            at, L = slots.shape
            if at:  # (none, when every decode row is a 1-token prompt chunk that does not sample)
                flat = slots.view(-1)
                keys = k_cache.index_select(0, flat).view(at, L, KVH, D).transpose(1, 2)
                values = v_cache.index_select(0, flat).view(at, L, KVH, D).transpose(1, 2)
                query = (q.narrow(0, 0, at) if isinstance(rows, slice) else q[rows]).reshape(at, KVH, H // KVH, D)
                out[:at] = F.scaled_dot_product_attention(query, keys, values, attn_mask=mask).view(at, H, D)
        for start, end, slots, mask, samples in p.prompts:
            if sampled_only and not samples:
                continue
            if sampled_only:  # the last token attends to every key: no mask
                query, mask = q[end - 1:end].view(1, H, D).transpose(0, 1)[None], None
            else:
                query = q[start:end].view(-1, H, D).transpose(0, 1)[None]  # [1, H, n, D]
            if slots is None:  # a whole prompt: its fresh K/V are all it attends to
                keys, values = kv[start:end].unbind(1)
            else:  # a later chunk: the request's blocks, already holding this chunk too
                keys, values = k_cache.index_select(0, slots), v_cache.index_select(0, slots)
            keys, values = keys.transpose(0, 1)[None], values.transpose(0, 1)[None]
            n = query.shape[2]
            into = out[at:at + n].transpose(0, 1)[None]  # [1, H, n, D], written in place
            if slots is None and not sampled_only and n > PROMPT_ROWS and self.device.type == "cpu":
                self.causal_in_rows(query, keys, values, into)
            else:
                into.copy_(F.scaled_dot_product_attention(query, keys, values, attn_mask=mask,
                                                          is_causal=mask is None and not sampled_only, enable_gqa=True))
            at += n
        return out.view(-1, H * D)

    def lane_attention(self, query: torch.Tensor, mask: torch.Tensor, lanes: KVLanes, layer: int) -> torch.Tensor:
        """``[B, H * D]``: decode rows ``query`` ``[B, H * D]``, request ``i`` in lane ``i``, against ``layer``'s
        lanes up to the mask's length (views of the lanes, no copy)."""
        B, H, KVH, D = query.shape[0], self.heads, self.kv_heads, self.head_dim
        keys, values = lanes.keys_values(layer, B, mask.shape[-1])
        out = F.scaled_dot_product_attention(query.view(B, KVH, H // KVH, D), keys, values, attn_mask=mask)
        return out.view(B, H * D)

    def causal_in_rows(self, query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                       into: torch.Tensor) -> None:
        """A whole prompt's causal attention, ``[1, H, n, D]`` written ``into``, ``PROMPT_ROWS`` queries at a time,
        each block against the keys up to its last query (an additive mask on the block's own keys): the CPU's
        flash kernel takes as long causal as not, so one call computes every key for every query."""
        n = query.shape[2]
        into[:, :, :PROMPT_ROWS] = F.scaled_dot_product_attention(
            query[:, :, :PROMPT_ROWS], keys[:, :, :PROMPT_ROWS], values[:, :, :PROMPT_ROWS], is_causal=True,
            enable_gqa=True)
        for start in range(PROMPT_ROWS, n, PROMPT_ROWS):
            end = min(start + PROMPT_ROWS, n)
            into[:, :, start:end] = F.scaled_dot_product_attention(
                query[:, :, start:end], keys[:, :, :end], values[:, :, :end], attn_mask=self.block_mask(start, end),
                enable_gqa=True)

    def block_mask(self, start: int, end: int) -> torch.Tensor:
        """Queries ``start .. end-1`` against keys ``0 .. end-1``, causal: ``[end - start, end]``, 0 or -inf; kept
        for prompts of up to ``MASKS_KEPT`` tokens (2.2 MB of masks in float32), made anew for longer ones."""
        mask = self._block_masks.get((start, end))
        if mask is None:
            mask = torch.full((end - start, end), float("-inf"), dtype=self.dtype, device=self.device).triu(start + 1)
            if end <= MASKS_KEPT:
                self._block_masks[(start, end)] = mask
        return mask
