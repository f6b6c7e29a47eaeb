"""A whole decode step of the tiny model under ``torch.compile``, against the runner's eager step, side by side.

The runner's decode step is ~40 small ops a layer around its four matmuls and one SDPA; ``compile_overhead.py``
showed a compiled call costs more than the few ops any one piece of it would fuse. This asks the other question:
the WHOLE step (embedding, four layers, the LM head) as ONE graph, so one call's overhead buys every fusion.

The step is the runner's own dense decode step (``batch`` requests with ~250-token caches, each in its lane),
written here as an ``nn.Module`` over the runner's weights (norms folded, QKV rows interleaved as the runner's) and
compiled by inductor with ``freezing`` (weights as constants, so inductor packs the matmuls itself, MKL's packed
GEMM for these row counts), the key length dynamic. Writing the K/V into the pool and the lanes is an opaque custom
op: inductor functionalizes an ``index_copy_`` on a graph input into a copy of the whole buffer (48 ms a step
here). Prints the compile time, whether the compiled step's next tokens are the runner's, and the best of 5 blocks
of 300 calls of each: the runner's whole step (packing and head included), the compiled forward (given packed
inputs), and the same module eager.

    OMP_NUM_THREADS=1 PYTHONPATH=src python studies/continuous-step/compiled_decode.py [--batch 4]
"""

from __future__ import annotations

import argparse
import time

from compile_overhead import best_us  # beside this file


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=4, help="decode rows, and the rows MKL packs for (default 4)")
    args = parser.parse_args(argv)

    import torch
    import torch._inductor.config as inductor_config
    import torch.nn.functional as F

    from batchperf.engine.block_manager import BlockManager
    from batchperf.engine.model_runner import ModelRunner
    from batchperf.engine.packing import PackedStep
    from batchperf.engine.request import Request, Status
    from batchperf.engine.scheduler import Scheduled
    from batchperf.suite.models import get_model_spec, load_model

    torch.set_num_threads(1)
    inductor_config.freezing = True
    loaded = load_model(get_model_spec("tiny-qwen2"))
    R, block = args.batch, 16
    runner = ModelRunner(loaded.model, block, suppress_ids=[0])
    runner.allocate(512, batch_size=R)
    blocks = BlockManager(512, block, runner.bytes_per_block)
    requests = [Request(i, tuple(range(1, 250 + 3 * i)), 4, status=Status.RUNNING) for i in range(R)]
    for request in requests:
        blocks.reserve(request, request.num_tokens)
    runner.run([Scheduled.of(r, r.num_tokens) for r in requests])  # one prefill: request i gets lane i
    for request in requests:  # then one decode row each
        request.num_cached = request.num_tokens
        request.tokens.append(7)
        blocks.reserve(request, request.num_tokens)
    step = [Scheduled.of(r, 1) for r in requests]
    H, KVH, D, inter = runner.heads, runner.kv_heads, runner.head_dim, runner.intermediate

    # the schema given: this module's annotations are strings (from __future__ import annotations)
    @torch.library.custom_op("batchperf_study::kv_write", mutates_args=("pool", "lanes"),
                             schema="(Tensor(a!) pool, Tensor(b!) lanes, int layer, Tensor writes, "
                                    "Tensor lane_writes, Tensor kv) -> ()")
    def kv_write(pool, lanes, layer, writes, lane_writes, kv):  # noqa: ANN001, ANN202
        pool[layer].index_copy_(1, writes, kv)
        lanes[layer].index_copy_(1, lane_writes, kv)

    class DecodeStep(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()

            def frozen(t: torch.Tensor) -> torch.nn.Parameter:
                return torch.nn.Parameter(t.detach().clone(), requires_grad=False)

            hf = loaded.model
            self.qkv, self.b_qkv, self.o, self.gate_up, self.down = (torch.nn.ParameterList() for _ in range(5))
            for layer, ours in zip(hf.model.layers, runner.layers):
                self.qkv.append(frozen(runner._qkv_weight(layer.self_attn, ours.ln_attn)))
                self.b_qkv.append(frozen(ours.b_qkv))
                self.o.append(frozen(layer.self_attn.o_proj.weight))
                self.gate_up.append(frozen(runner._gate_up_weight(layer.mlp, ours.ln_mlp)))
                self.down.append(frozen(layer.mlp.down_proj.weight))
            self.head = frozen(runner.norm.fold(hf.lm_head.weight))
            self.embed = frozen(runner.embed)
            self.floor, self.rotary = runner.norm.floor, runner.rotary

        def norm(self, x: torch.Tensor) -> torch.Tensor:
            return x / torch.hypot(torch.linalg.vector_norm(x, 2, -1, keepdim=True), self.floor)

        def forward(self, ids, positions, writes, lane_writes, mask, pool, lanes):  # noqa: ANN001, ANN201
            T, L = ids.shape[0], mask.shape[-1]
            slots = (lanes.shape[2] - 1) // R
            rotary = self.rotary[positions][:, None]
            x = F.embedding(ids, self.embed)
            for i in range(len(self.qkv)):
                qkv = F.linear(self.norm(x), self.qkv[i], self.b_qkv[i])
                pairs = torch.view_as_complex(qkv[:, :(H + KVH) * D].reshape(T, H + KVH, D // 2, 2))
                qk = torch.view_as_real(pairs * rotary).reshape(T, H + KVH, D)
                kv = torch.stack([qk[:, H:], qkv[:, (H + KVH) * D:].view(T, KVH, D)])  # [2, T, KVH, D]
                kv_write(pool, lanes, i, writes, lane_writes, kv)
                by_lane = lanes[i, :, :R * slots].view(2, R, slots, KVH, D)[:, :, :L].transpose(2, 3)
                attn = F.scaled_dot_product_attention(qk[:, :H].reshape(T, KVH, H // KVH, D), by_lane[0], by_lane[1],
                                                      attn_mask=mask).reshape(T, H * D)
                x = x + F.linear(attn, self.o[i])
                gate_up = F.linear(self.norm(x), self.gate_up[i])
                x = x + F.linear(F.silu(gate_up[:, :inter]) * gate_up[:, inter:], self.down[i])
            return F.linear(self.norm(x), self.head)

    module = DecodeStep().eval()
    lanes = runner.lanes
    assigned = lanes.assign(step)
    packed = PackedStep.build(step, block, torch.device("cpu"), torch.float32, assigned, lanes.lane_slots,
                              lanes.scratch_slot)
    assert packed.dense, "the study's step should be a dense decode step"
    inputs = (packed.input_ids, packed.positions, packed.write_slots, packed.lane_writes, packed.decode_mask,
              runner.kv, lanes.kv)
    with torch.inference_mode():
        expected = runner.logits(step)[1].argmax(-1)
        compiled = torch.compile(module, fullgraph=True)
        torch._dynamo.mark_dynamic(packed.decode_mask, 3)
        start = time.perf_counter()
        got = compiled(*inputs).argmax(-1)
        took = time.perf_counter() - start
        print(f"tiny-qwen2, {R} decode rows, ~{packed.decode_mask.shape[-1]} keys, torch threads 1; compiled in "
              f"{took:.1f} s; next tokens the runner's: {torch.equal(got, expected)}")
        print(f"runner's whole step {best_us(lambda: runner.logits(step), 300):.0f} us; compiled forward "
              f"{best_us(lambda: compiled(*inputs), 300):.0f} us; the module eager "
              f"{best_us(lambda: module(*inputs), 300):.0f} us")


if __name__ == "__main__":
    main()
