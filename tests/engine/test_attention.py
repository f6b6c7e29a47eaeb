"""One step's attention (batchperf.engine.attention) against one SDPA call."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from batchperf.engine.attention import PROMPT_ROWS, StepAttention


@pytest.mark.parametrize("n", [65, 200, 256])
def test_a_prompts_attention_in_query_blocks_is_the_causal_attention(n):
    """On the CPU a whole prompt attends ``PROMPT_ROWS`` queries at a time, each block masked to its own keys: the
    same output as one causal call (grouped-query, 8 query heads on 2, head dim 32), for lengths that do not
    divide, written over whatever the output held."""
    assert n > PROMPT_ROWS
    attention = StepAttention(8, 2, 32, torch.device("cpu"), torch.float32)
    torch.manual_seed(n)
    query, keys, values = torch.randn(1, 8, n, 32), torch.randn(1, 2, n, 32), torch.randn(1, 2, n, 32)
    whole = F.scaled_dot_product_attention(query, keys, values, is_causal=True, enable_gqa=True)
    into = torch.full_like(whole, float("nan"))
    attention.causal_in_rows(query, keys, values, into)
    torch.testing.assert_close(into, whole, rtol=1e-6, atol=1e-6)


def test_block_masks_are_causal_from_their_first_query_and_kept_only_for_short_prompts():
    attention = StepAttention(8, 2, 32, torch.device("cpu"), torch.float32)
    mask = attention.block_mask(64, 128)  # queries 64..127 against keys 0..127
    assert mask.shape == (64, 128)
    assert bool((mask[:, :65] == 0).all())  # every query sees the keys up to its own position
    assert bool(torch.isinf(mask[0, 65:]).all()) and bool((mask[63] == 0).all())
    assert attention.block_mask(64, 128) is mask  # kept
    long = attention.block_mask(1024, 1088)
    assert attention.block_mask(1024, 1088) is not long  # past MASKS_KEPT tokens: made anew
