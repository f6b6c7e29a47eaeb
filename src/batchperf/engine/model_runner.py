"""The model runner: owns every tensor and runs ONE forward pass per engine step.

The forward pass of the Llama/Qwen2 family is written here on the weights of
the loaded Hugging Face model, so batching is under our control: the tokens of
every scheduled request — whole prompts, prompt chunks, single decode tokens —
are packed into one ``[T, hidden]`` matrix, and every matmul (QKV, output
projection, MLP, LM head) runs once over all of them, however ragged the batch
(on the CPU a prefill's MLP in slices of ``MLP_ROWS`` to twice as many rows). Only attention is per request
(:mod:`batchperf.engine.attention`): the decode rows share one SDPA call, against their K/V lanes on the CPU
(:mod:`batchperf.engine.lanes`) or keys gathered from the pool; each prompt gets its own causal call.

New K/V are written into the pool in place, K and V with one ``index_copy_`` (and on the CPU into their lanes);
nothing is ever concatenated. On Intel CPUs a dense decode step is padded to the rows MKL's packed weights were
packed for (``PackedStep``'s ``pad_to``).

The last layer only has to write every token's K/V: its attention, output
projection and MLP run just for the rows whose logits are sampled (one per
request), which spares a prompt of ``n`` tokens ``n - 1`` rows of that work —
about a fifth of a prefill on the four-layer tiny model. The rows kept are
computed exactly as before, so outputs do not change.

On the CPU in float32 every matmul runs through oneDNN on weights reordered
once, at construction, into its blocked layout (``prepack``), as vLLM's CPU
engine does (``onednn_mm``), with the residual adds and the MLP's
``silu(gate) * up`` as its post-ops; on Intel CPUs the matmuls of at most a
batch of rows (every decode step, the last layer's sampled rows, the LM head)
run on MKL's packed GEMM instead (``few_rows``; :mod:`batchperf.engine.matmul`).
RMSNorm, rotary (one complex product, in place, on query and key rows reordered once:
``_interleaved``), the EOS mask (the LM head's bias) and the attention masks are written to make few ops.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F

from batchperf.engine.attention import StepAttention
from batchperf.engine.lanes import KVLanes
from batchperf.engine.matmul import (
    FewRows,
    PackedWeight,
    few_rows_unsupported,
    linear_add,
    onednn_gated,
    onednn_linear,
    onednn_linear_add,
    prepack_supported,
    prepacked,
)
from batchperf.engine.packing import PackedStep
from batchperf.engine.scheduler import Scheduled

# on the CPU a prefill's MLP runs over slices of this many rows (to twice as many, all of one size; 4 x 256-token
# prompts in one step: 0.95x the step's time; 128 rows: no gain); on a GPU over all of them, in one launch each
MLP_ROWS = 256
SUPPORTED_MODEL_TYPES = frozenset({"qwen2", "qwen3", "llama", "mistral"})


@dataclass(frozen=True, slots=True)
class _RMSNorm:
    """RMSNorm over the last axis, as Hugging Face's: ``x * rsqrt(mean(x**2) + eps) * weight``.

    In float32 it is computed as ``x / hypot(|x|, sqrt(n * eps)) * (weight * sqrt(n))``, the same value in four
    ops with no Python scalar in them: ``F.rms_norm`` is a composite on the CPU (``pow``, ``mean``, ``add``,
    ``rsqrt``, two products, and a cast for each scalar) that took 1.6x as long on a decode step's 8 rows
    (studies/continuous-step). Other dtypes keep ``F.rms_norm``, which computes in float32 as Hugging Face does.

    ``folded`` (float32): the norm is followed by matmuls whose weights take ``weight * sqrt(n)`` into their
    input columns (``fold``), and the call stops at ``x / hypot(..)``: one op fewer, the same products.
    """

    weight: torch.Tensor
    eps: float
    scaled: torch.Tensor | None = None  # weight * sqrt(n), float32 only
    floor: torch.Tensor | None = None  # sqrt(n * eps), a 0-d tensor
    folded: bool = False

    @classmethod
    def of(cls, weight: torch.Tensor, eps: float, folded: bool = False) -> _RMSNorm:
        weight = weight.detach()
        if weight.dtype != torch.float32:
            return cls(weight, eps)
        n = weight.shape[-1]
        return cls(weight, eps, weight * math.sqrt(n), torch.tensor(math.sqrt(n * eps), device=weight.device),
                   folded)

    def fold(self, matrix: torch.Tensor) -> torch.Tensor:
        """The weight ``[out, in]`` of a matmul that reads this norm's output, as that matmul must see it."""
        return matrix.detach() * self.scaled if self.folded else matrix.detach()

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.scaled is None:
            return F.rms_norm(x, self.weight.shape, self.weight, self.eps)
        unit = x / torch.hypot(torch.linalg.vector_norm(x, 2, -1, keepdim=True), self.floor)
        return unit if self.folded else unit * self.scaled


@dataclass(frozen=True, slots=True)
class _Layer:
    w_qkv: torch.Tensor  # [(heads + 2 * kv_heads) * head_dim, hidden]
    b_qkv: torch.Tensor | None
    w_o: torch.Tensor  # [hidden, heads * head_dim]
    w_gate_up: torch.Tensor | None  # [2 * intermediate, hidden]; None when the gate and up matmuls are fused
    w_down: torch.Tensor  # [hidden, intermediate]
    ln_attn: _RMSNorm
    ln_mlp: _RMSNorm
    q_norm: _RMSNorm | None = None  # over head_dim: Qwen3's RMSNorm of each query / key head, before rotary
    k_norm: _RMSNorm | None = None
    w_gate: torch.Tensor | None = None  # [intermediate, hidden], prepacked: the fused path (``onednn_gated``)
    w_up: torch.Tensor | None = None


class _FewRowsLayer(NamedTuple):
    """A layer's weights in MKL's packed layout, for matmuls of at most a batch of rows (``FewRows``)."""

    qkv: PackedWeight
    o: PackedWeight
    gate_up: PackedWeight
    down: PackedWeight


def _linear_bias(linear: Any) -> torch.Tensor:
    if linear.bias is not None:
        return linear.bias.detach()
    return torch.zeros(linear.out_features, dtype=linear.weight.dtype, device=linear.weight.device)


class ModelRunner:
    """Packs a step's tokens, runs the model once, returns each sampling request's greedy token."""

    def __init__(self, hf_model: Any, block_size: int, suppress_ids: Sequence[int] = (),
                 prepack: bool | None = None, few_rows: bool | None = None) -> None:
        """``prepack``: run the matmuls through oneDNN on reordered weights (None: where ``prepack_supported``);
        ``few_rows``: once ``allocate`` is told the batch size, run the matmuls of at most that many rows on
        weights packed by MKL for it (None: where ``few_rows_supported``, i.e. an Intel CPU in float32)."""
        config = hf_model.config
        model_type = getattr(config, "model_type", None)
        if model_type not in SUPPORTED_MODEL_TYPES:
            raise ValueError(
                f"the continuous runner implements {', '.join(sorted(SUPPORTED_MODEL_TYPES))} models, "
                f"not {model_type!r}"
            )
        if getattr(config, "use_sliding_window", False):
            raise ValueError("sliding-window attention is not implemented by the continuous runner")
        self.block_size = block_size
        self.heads = int(config.num_attention_heads)
        self.kv_heads = int(config.num_key_value_heads or self.heads)
        self.head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // self.heads)
        self.eps = float(config.rms_norm_eps)
        self.intermediate = int(config.intermediate_size)
        self.dtype = hf_model.dtype
        self.float32 = self.dtype == torch.float32  # read on every layer of every step
        self.device = hf_model.device
        silu = getattr(config, "hidden_act", None) == "silu"
        if prepack is None:
            prepack = prepack_supported(self.device, self.dtype)
        elif prepack and not prepack_supported(self.device, self.dtype):
            raise ValueError(f"prepack: oneDNN's prepacked matmul runs on the CPU in float32, not {self.device} "
                             f"{self.dtype}")
        why_not = few_rows_unsupported(self.device, self.dtype)
        if few_rows is None:
            few_rows = why_not is None
        elif few_rows and why_not is not None:
            raise ValueError(f"few_rows: MKL's packed GEMM cannot run here: {why_not}; leave few_rows=None")
        self.prepack = prepack
        self.linear = onednn_linear if prepack else F.linear
        self.linear_add = onednn_linear_add if prepack else linear_add  # the residual stream's two matmuls
        self.use_few_rows = few_rows
        self.few: FewRows | None = None  # set by allocate(batch_size=...) where few_rows is supported
        self._few_layers: list[_FewRowsLayer] = []
        self._few_head: PackedWeight | None = None
        self._hf_model = hf_model  # the weights FewRows packs, once the batch size is known
        self.fuse_gate = prepack and silu
        inner = hf_model.model
        with torch.no_grad():
            self.embed = inner.embed_tokens.weight.detach()
            self.layers = [self._layer(layer) for layer in inner.layers]
            # the functional form of SiLU: the nn.Module's call took ~10 us a layer on a decode step
            self.act = F.silu if silu else inner.layers[0].mlp.act_fn
            self.norm = _RMSNorm.of(inner.norm.weight, self.eps, folded=True)
            self.lm_head = self._matrix(self.norm.fold(hf_model.lm_head.weight))
            # cos/sin of every position, from the model's own rotary module (so rope scaling is honoured)
            positions = torch.arange(int(config.max_position_embeddings), device=self.device)[None]
            probe = torch.zeros(1, dtype=self.dtype, device=self.device)
            cos, sin = (c[0].to(self.dtype).float() for c in inner.rotary_emb(probe, positions))  # [max_pos, D]
            half = self.head_dim // 2
            if not (torch.equal(cos[:, :half], cos[:, half:]) and torch.equal(sin[:, :half], sin[:, half:])):
                raise ValueError("the model's rotary embedding repeats no frequencies over the two halves of a head "
                                 "(rotate_half's form): the continuous runner implements only that form")
            # rotary as one complex product: x * cos + rotate_half(x) * sin pairs dim j with dim j + D/2, so the
            # query and key rows of the QKV weight are reordered (``_interleaved``) to hold each pair side by side
            self.rotary = torch.complex(cos[:, :half], sin[:, :half])  # [max_pos, D/2]
        # EOS cannot come before the target length: -inf in the LM head's bias (x + -inf = -inf, x + 0 = x), no op
        self.head_bias: torch.Tensor | None = None
        if suppress_ids:
            self.head_bias = torch.zeros(hf_model.lm_head.out_features, dtype=self.dtype, device=self.device)
            self.head_bias[sorted(set(suppress_ids))] = float("-inf")
        self.kv = None
        self.attention = StepAttention(self.heads, self.kv_heads, self.head_dim, self.device, self.dtype)

    def _matrix(self, weight: torch.Tensor) -> torch.Tensor:
        """A weight as ``self.linear`` reads it."""
        return prepacked(weight.contiguous()) if self.prepack else weight

    def _norm(self, norm: Any) -> _RMSNorm | None:
        return None if norm is None else _RMSNorm.of(self._interleaved(norm.weight.detach()), self.eps)

    def _interleaved(self, rows: torch.Tensor) -> torch.Tensor:
        """A query or key projection's rows (or bias, or a per-head norm's weight) reordered within each head from
        ``(x_0 .. x_{D/2-1}, x_{D/2} .. x_{D-1})`` to ``(x_0, x_{D/2}, x_1, x_{D/2+1}, ..)``: the pairs that rotary
        rotates together, side by side as one complex number's parts. Queries and keys are reordered alike, so
        their dot products, and so attention, are unchanged."""
        D = self.head_dim
        order = torch.arange(D, device=rows.device).view(2, D // 2).t().reshape(-1)
        return rows.reshape(-1, D, *rows.shape[1:])[:, order].reshape(rows.shape)

    def _qkv_weight(self, attn: Any, ln: _RMSNorm) -> torch.Tensor:
        """The concatenated QKV weight, its query and key rows ``_interleaved``, the norm before it folded in."""
        return ln.fold(torch.cat([self._interleaved(attn.q_proj.weight.detach()),
                                  self._interleaved(attn.k_proj.weight.detach()), attn.v_proj.weight.detach()]))

    @staticmethod
    def _gate_up_weight(mlp: Any, ln: _RMSNorm) -> torch.Tensor:
        """The concatenated gate and up weights, the norm before them folded in."""
        return ln.fold(torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]))

    def _layer(self, layer: Any) -> _Layer:
        attn, mlp = layer.self_attn, layer.mlp
        ln_attn = _RMSNorm.of(layer.input_layernorm.weight, self.eps, folded=True)
        ln_mlp = _RMSNorm.of(layer.post_attention_layernorm.weight, self.eps, folded=True)
        return _Layer(
            w_qkv=self._matrix(self._qkv_weight(attn, ln_attn)),
            b_qkv=None if attn.q_proj.bias is None else torch.cat([
                self._interleaved(_linear_bias(attn.q_proj)), self._interleaved(_linear_bias(attn.k_proj)),
                _linear_bias(attn.v_proj)]),
            w_o=self._matrix(attn.o_proj.weight.detach()),
            w_gate_up=None if self.fuse_gate else self._matrix(self._gate_up_weight(mlp, ln_mlp)),
            w_down=self._matrix(mlp.down_proj.weight.detach()),
            ln_attn=ln_attn,
            ln_mlp=ln_mlp,
            q_norm=self._norm(getattr(attn, "q_norm", None)),  # over one head: its weight reordered as the head
            k_norm=self._norm(getattr(attn, "k_norm", None)),
            w_gate=self._matrix(ln_mlp.fold(mlp.gate_proj.weight)) if self.fuse_gate else None,
            w_up=self._matrix(ln_mlp.fold(mlp.up_proj.weight)) if self.fuse_gate else None,
        )

    @property
    def bytes_per_block(self) -> int:
        return 2 * len(self.layers) * self.block_size * self.kv_heads * self.head_dim * self.dtype.itemsize

    @property
    def kv(self) -> torch.Tensor | None:
        """The KV pool (None until ``allocate``; setting None frees it)."""
        return self._kv

    @kv.setter
    def kv(self, pool: torch.Tensor | None) -> None:
        self._kv = pool
        # each layer's K and V views, made once: indexing the pool per layer and step cost ~1 us a view
        self._kv_views = [] if pool is None else [(layer, layer[0], layer[1]) for layer in pool]
        self.lanes: KVLanes | None = None  # made by allocate(batch_size=...) on the CPU

    def allocate(self, num_blocks: int, batch_size: int | None = None) -> None:
        """The KV pool: ``[layers, 2 (K, V), num_blocks * block_size (slots), kv_heads, head_dim]``; with
        ``batch_size`` (the most requests a step runs), the weights packed for matmuls of that many rows where
        ``few_rows`` is supported (every decode step's, the last layer's sampled rows', the LM head's), and on the
        CPU ``KVLanes`` for that many requests, as long as the pool divided among them."""
        if batch_size is not None and self.use_few_rows and (self.few is None or self.few.rows != batch_size):
            self._pack_few_rows(batch_size)
        shape = (len(self.layers), 2, num_blocks * self.block_size, self.kv_heads, self.head_dim)
        if self.kv is None or self.kv.shape != shape:
            self.kv = None  # free the old pool before allocating the new one
            self.kv = torch.zeros(shape, dtype=self.dtype, device=self.device)
        self.lanes = None
        if batch_size is not None and self.device.type == "cpu":
            self.lanes = KVLanes(batch_size, max(num_blocks // batch_size, 1) * self.block_size, self.kv)

    @torch.no_grad()
    def _pack_few_rows(self, rows: int) -> None:
        self.few = few = FewRows(rows)
        self._few_layers = []
        for layer, ours in zip(self._hf_model.model.layers, self.layers):
            attn, mlp = layer.self_attn, layer.mlp
            self._few_layers.append(_FewRowsLayer(
                qkv=few.pack(self._qkv_weight(attn, ours.ln_attn)),
                o=few.pack(attn.o_proj.weight),
                gate_up=few.pack(self._gate_up_weight(mlp, ours.ln_mlp)),
                down=few.pack(mlp.down_proj.weight)))
        self._few_head = few.pack(self.norm.fold(self._hf_model.lm_head.weight))

    def run(self, step: Sequence[Scheduled]) -> list[int | None]:
        """Greedy next token of every item that samples this step (None for a prompt chunk that doesn't)."""
        sampling, logits = self.logits(step)
        out: list[int | None] = [None] * len(step)
        # ties: the lowest token id, as generate's torch.argmax
        for i, token in zip(sampling, logits.argmax(-1).tolist()):
            out[i] = token
        return out

    @torch.inference_mode()
    def logits(self, step: Sequence[Scheduled]) -> tuple[list[int], torch.Tensor]:
        """Run the step's forward pass; the items that sample, and their next-token logits ``[n, vocab]``."""
        if self.kv is None:
            raise RuntimeError("allocate() the KV pool before running a step")
        # decode rows first, so they are one contiguous slice of the packed tokens; with lanes, in lane order
        decode = [i for i, it in enumerate(step) if it.num_new == 1]
        order = decode + [i for i, it in enumerate(step) if it.num_new != 1]
        if self.lanes is None:
            packed = PackedStep.build([step[i] for i in order], self.block_size, self.device, self.dtype)
        else:
            lanes = self.lanes.assign(step)
            decode.sort(key=lanes.__getitem__)
            order = decode + order[len(decode):]
            packed = PackedStep.build([step[i] for i in order], self.block_size, self.device, self.dtype,
                                      [lanes[i] for i in order], self.lanes.lane_slots, self.lanes.scratch_slot,
                                      pad_to=0 if self.few is None else self.few.rows)
        hidden = self._forward(packed)  # [sampling items, hidden], in packed order
        hidden = self.norm(hidden)
        if self.few is not None and self.few.fits(hidden):
            logits = self.few.linear(hidden, self._few_head, self.head_bias)
        else:
            logits = self.linear(hidden, self.lm_head, self.head_bias)
        if logits.shape[0] > packed.rows:  # a padded decode step
            logits = logits.narrow(0, 0, packed.rows)
        return [i for i in order if step[i].samples], logits

    def _forward(self, p: PackedStep) -> torch.Tensor:
        """Hidden states of the sampled rows (``p.keep_rows``) after the last layer."""
        T, H, KVH, D = p.input_ids.numel(), self.heads, self.kv_heads, self.head_dim
        rotary = self.rotary[p.positions][:, None]  # [T, 1, D/2]
        x = F.embedding(p.input_ids, self.embed)  # [T, hidden]
        last = len(self.layers) - 1
        # the hot loop slices with narrow() and reads views made once: Python's tensor indexing costs ~2-5 us a call
        for index, (layer, (pool, k_cache, v_cache)) in enumerate(zip(self.layers, self._kv_views)):
            few = self._few_layers[index] if self.few is not None else None
            h = layer.ln_attn(x)
            if few is not None and self.few.fits(h):
                qkv = self.few.linear(h, few.qkv, layer.b_qkv)  # [T, (H + 2 KVH) D]
            else:
                qkv = self.linear(h, layer.w_qkv, layer.b_qkv)
            self._rotate(qkv.narrow(1, 0, (H + KVH) * D), rotary, layer)  # in place: q and k stay in qkv
            q = qkv.narrow(1, 0, H * D)  # [T, H * D]
            kv = qkv.narrow(1, H * D, 2 * KVH * D).view(T, 2, KVH, D)
            if p.rows < T:  # padding rows write no K/V
                kv = kv.narrow(0, 0, p.rows)
            both = kv.transpose(0, 1)  # [2, rows, KVH, D]
            pool.index_copy_(1, p.write_slots, both)  # K and V, [2, slots, KVH, D], in one op
            if p.lane_writes is not None:
                self.lanes.write(index, both, p.lane_writes, p.lane_spans)
            if index < last:
                attn = self.attention(p, q, kv, k_cache, v_cache, self.lanes, index)  # [T, H * D]
            else:  # from here on only the sampled rows matter
                attn = self.attention(p, q, kv, k_cache, v_cache, self.lanes, index, sampled_only=True)  # [n, H*D]
                if not p.keep_all:
                    x = x[p.keep_rows]
            x = self._after_attention(x, attn, layer, few)
        return x

    def _rotate(self, qk: torch.Tensor, rotary: torch.Tensor, layer: _Layer) -> None:
        """Rotary on ``qk`` (``[T, (H + KVH) * D]``, the query and key columns of a QKV output) in place: q and k at
        once, each (x_j, x_{j+D/2}) pair times e^(i theta_j), in float32; Qwen3's per-head norms first."""
        T, H, KVH, D = qk.shape[0], self.heads, self.kv_heads, self.head_dim
        if layer.q_norm is not None:  # Qwen3: each head normalised on its own
            heads = qk.view(T, H + KVH, D)
            qk.copy_(torch.cat([layer.q_norm(heads[:, :H]), layer.k_norm(heads[:, H:])], 1).view(T, -1))
        if self.float32:
            torch.view_as_complex(qk.view(T, H + KVH, D // 2, 2)).mul_(rotary)
        else:
            pairs = torch.view_as_complex(qk.float().view(T, H + KVH, D // 2, 2))
            qk.copy_(torch.view_as_real(pairs * rotary).view(T, -1))

    def _after_attention(self, x: torch.Tensor, attn: torch.Tensor, layer: _Layer,
                         few: _FewRowsLayer | None) -> torch.Tensor:
        """The output projection and the MLP, each with its residual add: on MKL's few-rows weights where the rows
        fit (a decode step, the last layer's sampled rows), else on ``self.linear``'s (the MLP in slices)."""
        if few is not None and self.few.fits(x):
            x = x + self.few.linear(attn, few.o)
            return x + self.few.linear(self._act_times_up(self.few.linear(layer.ln_mlp(x), few.gate_up)), few.down)
        return self._mlp(self.linear_add(x, attn, layer.w_o), layer)

    def _act_times_up(self, gate_up: torch.Tensor) -> torch.Tensor:
        """``act(gate) * up`` from one matmul's ``[rows, 2 * intermediate]`` output."""
        n = self.intermediate
        return self.act(gate_up.narrow(1, 0, n)) * gate_up.narrow(1, n, n)

    def _mlp(self, x: torch.Tensor, layer: _Layer) -> torch.Tensor:
        """``x + down(act(gate(h)) * up(h))``, ``h = ln_mlp(x)``; on the CPU a prefill's rows in slices of one size,
        ``MLP_ROWS`` to ``2 * MLP_ROWS - 1`` rows, so its ``[rows, intermediate]`` temporaries are small enough to
        stay in the cache and in the allocator's heap (a fresh 8 MB block is page-faulted in at each allocation);
        4 x 256 prompt tokens and 3 decode rows run as 4 slices of 256-257 rows, not a fifth of 3 (whose matmuls'
        set-up cost ~0.2 ms a layer)."""
        rows = x.shape[0]
        if rows < 2 * MLP_ROWS or self.device.type != "cpu":
            return self.linear_add(x, self._gated(layer.ln_mlp(x), layer), layer.w_down)
        return torch.cat([self._mlp(part, layer) for part in x.tensor_split(rows // MLP_ROWS)])

    def _gated(self, h: torch.Tensor, layer: _Layer) -> torch.Tensor:
        """The MLP's ``act(gate) * up``, before its down projection."""
        if layer.w_gate_up is None:
            return onednn_gated(h, layer.w_gate, layer.w_up)
        return self._act_times_up(self.linear(h, layer.w_gate_up))
