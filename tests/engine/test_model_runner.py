"""The model runner against Hugging Face ``generate``, request by request, on the tiny model.

Greedy outputs must match token for token, and every next-token logit vector must
match ``generate``'s (EOS-masked) scores within ``ATOL[dtype]``. Exact ties cannot part
the two: both take ``argmax``, which returns the lowest id. A *near* tie can: the
batched forward sums in another order, so logits differ by ~1e-6 in float32, by a
few bf16 steps in bfloat16. Where the tokens differ, the test accepts it only if
``generate``'s own scores for the two tokens are within ``2 * ATOL`` — a tie at the
dtype's precision — and stops comparing that request there (its contexts differ
from then on).

The comparisons run on every device and dtype of ``CASES``: on the CPU in CI, and
on CUDA (float32 and bfloat16) whenever the suite runs on a GPU machine.
"""

from __future__ import annotations

import gc
import random
import sys

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from batchperf.engine.block_manager import BlockManager, blocks_for
from batchperf.engine.matmul import few_rows_supported, onednn_gated, prepack_supported, prepacked
from batchperf.engine.model_runner import ModelRunner, _RMSNorm
from batchperf.engine.request import Request, Status
from batchperf.engine.scheduler import Scheduled, Scheduler, SchedulerConfig

# The tiny model's logits are O(1) (|logit| <= ~1.2), where one bf16 step is 2^-7 = 0.0078. On the CPU the two
# orders of summation differ by at most 0.0083 in bf16 (one step; measured over 24 requests); CUDA's kernels
# (cuBLAS, SDPA) are other orders again, so bf16 allows ~6 steps. Not yet measured on a GPU.
ATOL = {"float32": 1e-4, "bfloat16": 0.05}
CASES = [("cpu", "float32"), ("cpu", "bfloat16"), ("cuda", "float32"), ("cuda", "bfloat16")]


@pytest.fixture(scope="module", params=CASES, ids=[f"{d}-{t}" for d, t in CASES])
def model(request, tiny_model):
    """The tiny model on each device and dtype (CUDA cases skip without a GPU)."""
    from dataclasses import replace

    from batchperf.suite.models import load_model

    device, dtype = request.param
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device: the runner's GPU comparisons run on a GPU machine")
    if (device, dtype) == ("cpu", "float32"):
        return tiny_model
    return load_model(replace(tiny_model.spec, dtype=dtype), device)


def eos_of(model) -> int:
    return int(model.config.eos_token_id)


def hf_reference(model, request: Request) -> tuple[list[int], torch.Tensor]:
    """``generate`` for the request alone, EOS suppressed as hf-static does: tokens and scores [target, vocab]."""
    with torch.inference_mode():
        out = model.model.generate(
            torch.tensor([request.prompt_ids], device=model.device),
            max_new_tokens=request.target_len,
            min_new_tokens=request.target_len,
            do_sample=False,
            pad_token_id=eos_of(model),
            output_scores=True,
            return_dict_in_generate=True,
        )
    return out.sequences[0, request.prompt_len:].tolist(), torch.cat(out.scores)


def run_engine(runner: ModelRunner, requests: list[Request], config: SchedulerConfig, num_blocks: int):
    """Drive scheduler and runner to the end; each request's logits per sampled token, and the preemptions. The
    pool is allocated as the backend does, with the batch size (MKL's packed weights for it, where supported)."""
    runner.allocate(num_blocks, config.batch_size)
    scheduler = Scheduler(config, BlockManager(num_blocks, runner.block_size, runner.bytes_per_block))
    for request in requests:
        scheduler.add(request)
    logits: dict[int, list[torch.Tensor]] = {r.request_id: [] for r in requests}
    while scheduler.has_work:
        step = scheduler.schedule()
        sampling, step_logits = runner.logits(step)
        tokens: list[int | None] = [None] * len(step)
        for i, row in zip(sampling, step_logits):
            tokens[i] = int(row.argmax())
            logits[step[i].request.request_id].append(row)
        scheduler.postprocess(step, tokens, 0.0)
    return logits, scheduler.num_preemptions


def assert_matches_generate(model, request: Request, logits: list[torch.Tensor]) -> None:
    ref_tokens, ref_scores = hf_reference(model, request)
    ours = request.output_ids
    atol = ATOL[model.spec.dtype]
    assert len(ours) == request.target_len == len(logits)
    for j, (mine, theirs) in enumerate(zip(ours, ref_tokens)):
        finite = torch.isfinite(ref_scores[j])
        assert torch.equal(finite, torch.isfinite(logits[j])), f"request {request.request_id}: EOS masking differs"
        torch.testing.assert_close(logits[j][finite].float(), ref_scores[j][finite].float(), atol=atol, rtol=0)
        if mine != theirs:
            gap = float(ref_scores[j][theirs] - ref_scores[j][mine])
            assert gap <= 2 * atol, f"request {request.request_id} token {j}: {mine} != {theirs}, not a tie (gap {gap})"
            return  # a tie at this dtype's precision parted the two; the rest have different contexts


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    shapes=st.lists(st.tuples(st.integers(1, 24), st.integers(1, 6)), min_size=1, max_size=4),
    seed=st.integers(0, 2**16),
    batch_size=st.integers(1, 4),
    block_size=st.sampled_from([1, 4, 16]),
    spare_blocks=st.integers(0, 6),
    budget=st.one_of(st.none(), st.integers(0, 12)),
    few_rows=st.booleans(),
)
def test_outputs_equal_generate_for_each_request_alone(model, shapes, seed, batch_size, block_size, spare_blocks,
                                                       budget, few_rows):
    """``few_rows``: MKL's packed GEMM for steps of at most a batch of rows where it runs (an Intel CPU in float32),
    or never (oneDNN's prepacked weights for every matmul)."""
    rng = random.Random(seed)
    requests = [
        Request(i, tuple(rng.randrange(1, model.vocab_size) for _ in range(p)), t) for i, (p, t) in enumerate(shapes)
    ]
    # room for the largest request and a few blocks more: small pools force preemption and recompute
    largest = max(blocks_for(r.prompt_len + r.target_len - 1, block_size) for r in requests)
    config = SchedulerConfig(batch_size, None if budget is None else batch_size + budget)
    runner = ModelRunner(model.model, block_size, suppress_ids=[eos_of(model)], few_rows=None if few_rows else False)
    logits, _ = run_engine(runner, requests, config, largest + spare_blocks)
    for request in requests:
        assert_matches_generate(model, request, logits[request.request_id])


def test_preemption_and_chunks_still_match_generate(model):
    """A fixed case that surely preempts (pool of one request) and chunks prompts (budget 5)."""
    rng = random.Random(7)
    requests = [Request(i, tuple(rng.randrange(1, model.vocab_size) for _ in range(9 + i)), 5) for i in range(3)]
    runner = ModelRunner(model.model, 4, suppress_ids=[eos_of(model)])
    logits, preemptions = run_engine(runner, requests, SchedulerConfig(3, max_step_tokens=5), num_blocks=5)
    assert preemptions > 0
    for request in requests:
        assert_matches_generate(model, request, logits[request.request_id])


# under inference_mode F.linear reaches the dispatcher whole; outside it, as (add)mm
_MATMULS = (torch.ops.aten.linear.default, torch.ops.aten.mm.default, torch.ops.aten.addmm.default,
            # the CPU float32 runner: oneDNN on prepacked weights, the residual add fused into O and down
            torch.ops.mkldnn._linear_pointwise.default, torch.ops.mkldnn._linear_pointwise.binary,
            # on an Intel CPU, steps of at most a batch of rows: MKL's packed GEMM (no fused post-ops)
            torch.ops.mkl._mkl_linear.default)


class _CountMatmuls(torch.utils._python_dispatch.TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in _MATMULS:
            self.count += 1
        return func(*args, **(kwargs or {}))


def test_one_forward_pass_per_step_however_ragged_and_kv_written_in_place(tiny_model):
    """The study's scheduler ran one forward per distinct cache length: here a step's matmul count does not
    depend on how many requests, or how many distinct lengths, it holds; and the pool is never reallocated."""
    runner = ModelRunner(tiny_model.model, 4, suppress_ids=[eos_of(tiny_model)])
    runner.allocate(64)
    pool = runner.kv.data_ptr()
    blocks = BlockManager(64, 4, runner.bytes_per_block)

    def counted(step: list[Scheduled]) -> int:
        with _CountMatmuls() as counter:
            runner.run(step)
        return counter.count

    def admit(request: Request, num_new: int) -> Scheduled:
        blocks.reserve(request, request.num_cached + num_new)
        return Scheduled.of(request, num_new)

    alone = Request(0, (5, 6, 7), 4)
    single = counted([admit(alone, 3)])
    ragged = [Request(1, tuple(range(1, 12)), 4), Request(2, (9,) * 6, 4), Request(3, (3,) * 20, 4)]
    for request in ragged[:2]:  # give two of them a cache of different lengths
        runner.run([admit(request, request.num_tokens)])
        request.num_cached = request.num_tokens
        request.tokens.append(11)
    mixed = [admit(ragged[0], 1), admit(ragged[1], 1), admit(ragged[2], 20)]  # two decodes and a prompt
    # QKV, O, gate-up (or gate and up, when oneDNN fuses silu and the product into them), down; the LM head
    per_layer = 5 if runner.fuse_gate else 4
    assert runner.fuse_gate == runner.prepack  # the tiny model's act is silu: fused wherever oneDNN runs
    assert counted(mixed) == single == per_layer * len(runner.layers) + 1
    assert runner.kv.data_ptr() == pool


def test_an_unsupported_model_type_is_refused(tiny_model):
    class Config:
        model_type = "gpt2"

    class Model:
        config = Config()

    with pytest.raises(ValueError, match="not 'gpt2'"):
        ModelRunner(Model(), 16)


class _CountOps(torch.utils._python_dispatch.TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += 1
        return func(*args, **(kwargs or {}))


def _decode_step(runner: ModelRunner, blocks: BlockManager, batch: int) -> list[Scheduled]:
    """``batch`` running requests with caches of different lengths, each about to decode one token."""
    step = []
    for i in range(batch):
        request = Request(i, tuple(range(1, 6 + 3 * i)), 4, status=Status.RUNNING)
        blocks.reserve(request, request.num_tokens)
        runner.run([Scheduled.of(request, request.num_tokens)])
        request.num_cached = request.num_tokens
        request.tokens.append(7)
        blocks.reserve(request, request.num_tokens)
        step.append(Scheduled.of(request, 1))
    return step


def _decode_cost(runner: ModelRunner, step: list[Scheduled]) -> tuple[int, int, int]:
    """(torch ops, Python function calls, C function calls) of one decode step through the runner."""
    with _CountOps() as ops:
        runner.run(step)
    calls = {"call": 0, "c_call": 0}

    def profile(frame, event, arg):
        if event in calls:
            calls[event] += 1

    gc.collect()  # no cyclic collection (and the finalizers it runs, counted as calls) inside the counted step
    gc.disable()
    sys.setprofile(profile)
    try:
        runner.run(step)
    finally:
        sys.setprofile(None)
        gc.enable()
    return ops.count, calls["call"], calls["c_call"]


def test_a_decode_step_costs_the_same_calls_at_any_batch_size(tiny_model):
    """No per-request loop of calls in a decode step: the torch ops (kernel launches on a GPU), the Python
    function calls and the C calls (numpy, builtins) it makes are the same for 1, 4 and 24 requests. A loop
    that ran anything per request (the study's per-length forward passes, a per-request KV copy, a numpy
    call per block table) would add calls for every request."""
    runner = ModelRunner(tiny_model.model, 4, suppress_ids=[eos_of(tiny_model)])
    runner.allocate(512)
    blocks = BlockManager(512, 4, runner.bytes_per_block)
    costs = {}
    # a first step, not counted: one-time work of a fresh process (a lazy import or cache fill) once landed in the
    # first counted step (CI on a fresh clone: 2 Python and 2 C calls more at batch 1 than at 4 and 24)
    for batch in (2, 1, 4, 24):
        step = _decode_step(runner, blocks, batch)
        costs[batch] = _decode_cost(runner, step)
        for item in step:
            blocks.release(item.request)
    assert costs[1] == costs[4] == costs[24], costs


def test_qwen3_with_its_head_dim_and_qk_norms_matches_generate(tmp_path):
    """Qwen3 (per-head q/k RMSNorm, head_dim 32 != hidden / heads = 16), dummy weights, float32."""
    import json

    from batchperf.backends.dummy import build_dummy
    from batchperf.backends.model import ModelSpec
    from batchperf.suite.models import shipped_config_dir

    config = json.loads((shipped_config_dir("qwen3-0.6b") / "config.json").read_text())
    config |= {"num_hidden_layers": 2, "hidden_size": 64, "head_dim": 32, "intermediate_size": 128,
               "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256, "max_position_embeddings": 128,
               "bos_token_id": 0, "eos_token_id": 1}
    (tmp_path / "config.json").write_text(json.dumps(config))
    model = build_dummy(ModelSpec("small-qwen3", "Qwen/Qwen3-0.6B", tier="gpu", dtype="float32", weights="dummy"),
                        tmp_path)
    assert model.model.model.layers[0].self_attn.q_norm is not None
    rng = random.Random(3)
    requests = [Request(i, tuple(rng.randrange(1, 256) for _ in range(4 + 5 * i)), 5) for i in range(3)]
    runner = ModelRunner(model.model, 4, suppress_ids=[eos_of(model)])
    logits, _ = run_engine(runner, requests, SchedulerConfig(2), num_blocks=32)
    for request in requests:
        assert_matches_generate(model, request, logits[request.request_id])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_runners_rms_norm_is_hugging_faces(dtype):
    """float32's four-op form (``x / hypot(|x|, sqrt(n eps)) * weight sqrt(n)``) is Hugging Face's RMSNorm, a
    zero row included; other dtypes are ``F.rms_norm`` itself."""
    torch.manual_seed(0)
    x = torch.randn(37, 64, dtype=dtype) * 3
    x[5] = 0
    weight = torch.randn(64, dtype=dtype)
    variance = x.float().pow(2).mean(-1, keepdim=True)
    expected = weight * (x.float() * torch.rsqrt(variance + 1e-6)).to(dtype)  # Qwen2RMSNorm.forward
    got = _RMSNorm.of(weight, 1e-6)(x)
    assert got.dtype == dtype and (_RMSNorm.of(weight, 1e-6).scaled is None) == (dtype != torch.float32)
    torch.testing.assert_close(got, expected, rtol=1e-6 if dtype == torch.float32 else 1e-2, atol=1e-6)
    assert not got[5].any()


def test_a_folded_norm_times_its_folded_matmul_is_the_norm_then_the_matmul():
    """float32: the matmul after a norm takes the norm's weight (times sqrt(n)) into its input columns, and the norm
    stops before that product; bfloat16 folds nothing."""
    torch.manual_seed(1)
    x, weight, matrix = torch.randn(9, 64) * 3, torch.randn(64), torch.randn(48, 64)
    folded = _RMSNorm.of(weight, 1e-6, folded=True)
    torch.testing.assert_close(folded(x) @ folded.fold(matrix).T, _RMSNorm.of(weight, 1e-6)(x) @ matrix.T,
                               rtol=1e-5, atol=1e-5)
    bf16 = _RMSNorm.of(weight.bfloat16(), 1e-6, folded=True)
    assert torch.equal(bf16.fold(matrix.bfloat16()), matrix.bfloat16())
    assert torch.equal(bf16(x.bfloat16()), _RMSNorm.of(weight.bfloat16(), 1e-6)(x.bfloat16()))


@pytest.mark.skipif(not prepack_supported(torch.device("cpu"), torch.float32), reason="oneDNN is not built in")
@pytest.mark.parametrize("rows", [1, 8, 128, 259])
def test_the_fused_gate_is_silu_of_gate_times_up(rows):
    torch.manual_seed(rows)
    x, gate, up = torch.randn(rows, 64), torch.randn(96, 64) * 0.2, torch.randn(96, 64) * 0.2
    got = onednn_gated(x, prepacked(gate), prepacked(up))
    torch.testing.assert_close(got, torch.nn.functional.silu(x @ gate.T) * (x @ up.T), rtol=1e-5, atol=1e-5)


needs_few_rows = pytest.mark.skipif(not few_rows_supported(torch.device("cpu"), torch.float32),
                                    reason="MKL's packed GEMM for few rows runs on an Intel CPU (MKL built in)")


@needs_few_rows
def test_few_rows_decode_steps_cost_the_same_calls_at_any_batch_below_the_packed_rows(tiny_model):
    """With the weights packed for 4 rows, a decode step of 1 or 3 requests (both padded to 4) makes the same torch
    ops, Python calls and C calls, and every matmul of it is MKL's packed call: 4 a layer (QKV, O, gate-up, down)
    and the LM head."""
    runner = ModelRunner(tiny_model.model, 4, suppress_ids=[eos_of(tiny_model)])
    runner.allocate(512, batch_size=4)
    assert runner.few is not None and runner.few.rows == 4
    blocks = BlockManager(512, 4, runner.bytes_per_block)
    costs, matmuls = {}, {}
    for batch in (1, 3):
        step = _decode_step(runner, blocks, batch)
        costs[batch] = _decode_cost(runner, step)
        with _CountMatmuls() as counter:
            runner.run(step)
        matmuls[batch] = counter.count
        for item in step:
            blocks.release(item.request)
    assert costs[1] == costs[3], costs
    assert matmuls[1] == matmuls[3] == 4 * len(runner.layers) + 1


@needs_few_rows
def test_a_new_batch_size_repacks_and_the_same_one_does_not(tiny_model):
    runner = ModelRunner(tiny_model.model, 4, suppress_ids=[eos_of(tiny_model)])
    runner.allocate(16, batch_size=4)
    first = runner.few
    runner.allocate(16, batch_size=4)
    assert runner.few is first
    runner.allocate(16, batch_size=8)
    assert runner.few is not first and runner.few.rows == 8


def test_few_rows_is_refused_where_mkl_cannot_run_it(tiny_model, monkeypatch):
    """Not an Intel CPU (MKL's slow path): asked for, a clear error naming the vendor; by default, off."""
    from batchperf.engine import matmul

    monkeypatch.setattr(matmul, "cpu_vendor", lambda: "AuthenticAMD")
    with pytest.raises(ValueError, match="cannot run here: it runs on an Intel CPU, not AuthenticAMD"):
        ModelRunner(tiny_model.model, 4, few_rows=True)
    runner = ModelRunner(tiny_model.model, 4)
    runner.allocate(16, batch_size=4)
    assert runner.few is None


def test_prompts_longer_than_an_mlp_slice_match_generate(tiny_model):
    """Two prompts of 300 and 230 tokens in one step (530 rows): the MLP runs over two slices of 265 rows."""
    from batchperf.engine.model_runner import MLP_ROWS

    rng = random.Random(11)
    requests = [Request(i, tuple(rng.randrange(1, tiny_model.vocab_size) for _ in range(n)), 3)
                for i, n in enumerate((300, 230))]
    assert sum(r.prompt_len for r in requests) > 2 * MLP_ROWS
    runner = ModelRunner(tiny_model.model, 16, suppress_ids=[eos_of(tiny_model)])
    logits, _ = run_engine(runner, requests, SchedulerConfig(2), num_blocks=64)
    for request in requests:
        assert_matches_generate(tiny_model, request, logits[request.request_id])


def test_the_mlp_slices_are_of_one_size_and_give_the_whole_mlp(tiny_model, monkeypatch):
    """1027 rows (four 256-token prompts and three decode rows) run as 4 slices of 256-257 rows, not 4 of 256 and one
    of 3; the result is the MLP over all rows at once."""
    from batchperf.engine.model_runner import MLP_ROWS

    runner = ModelRunner(tiny_model.model, 16)
    layer = runner.layers[0]
    x = torch.randn(4 * MLP_ROWS + 3, tiny_model.model.config.hidden_size)
    with torch.inference_mode():
        whole = runner.linear_add(x, runner._gated(layer.ln_mlp(x), layer), layer.w_down)
        sizes = []
        gated = runner._gated
        monkeypatch.setattr(runner, "_gated", lambda h, lay: sizes.append(h.shape[0]) or gated(h, lay))
        sliced = runner._mlp(x, layer)
    assert sizes == [MLP_ROWS + 1] * 3 + [MLP_ROWS]
    torch.testing.assert_close(sliced, whole, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("batch_size", [None, 2])
def test_a_step_whose_only_one_token_rows_do_not_sample_gives_the_prompts_logits(tiny_model, batch_size):
    """A 1-token prompt chunk that does not sample rides with the decode rows; when it is the only such row, the
    last layer attends for no decode row at all, and the step's logits are the other prompt's, as run alone."""
    runner = ModelRunner(tiny_model.model, 4, suppress_ids=[eos_of(tiny_model)])
    runner.allocate(32, batch_size)
    blocks = BlockManager(32, 4, runner.bytes_per_block)
    chunked = Request(0, (5, 6, 7, 8, 9), 2, status=Status.RUNNING)
    blocks.reserve(chunked, 3)
    runner.run([Scheduled.of(chunked, 3)])  # its first 3 tokens
    chunked.num_cached = 3
    blocks.reserve(chunked, 4)
    prompt = Request(1, (11, 12, 13, 14), 2, status=Status.RUNNING)
    blocks.reserve(prompt, 4)
    step = [Scheduled.of(chunked, 1), Scheduled.of(prompt, 4)]  # the chunk reaches token 4 of 5: no sample
    assert not step[0].samples and step[1].samples
    sampling, logits = runner.logits(step)
    alone = ModelRunner(tiny_model.model, 4, suppress_ids=[eos_of(tiny_model)])
    alone.allocate(32)
    other = BlockManager(32, 4, alone.bytes_per_block)
    again = Request(1, (11, 12, 13, 14), 2)
    other.reserve(again, 4)
    assert sampling == [1]
    torch.testing.assert_close(logits, alone.logits([Scheduled.of(again, 4)])[1], rtol=0, atol=1e-5)
