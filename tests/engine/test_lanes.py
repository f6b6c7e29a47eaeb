"""The runner's K/V lanes (batchperf.engine.lanes): which requests hold one, and that reading them changes nothing."""

from __future__ import annotations

import random

import pytest
import torch

from batchperf.engine.block_manager import BlockManager
from batchperf.engine.lanes import KVLanes
from batchperf.engine.model_runner import ModelRunner
from batchperf.engine.packing import PackedStep
from batchperf.engine.request import Request, Status
from batchperf.engine.scheduler import Scheduled, SchedulerConfig

from .test_model_runner import _CountOps, _decode_step, eos_of, run_engine


def _running(request_id: int, prompt_len: int, num_cached: int = 0) -> Request:
    request = Request(request_id, tuple(range(1, prompt_len + 1)), 4, status=Status.RUNNING)
    request.num_cached = num_cached
    return request


def _noted(packed: PackedStep, dense: list[bool]) -> PackedStep:
    dense.append(packed.dense)
    return packed


def _pool() -> torch.Tensor:
    return torch.zeros(2, 2, 64, 1, 2)  # [layers, 2, slots, kv_heads, head_dim]


def test_prompts_get_lanes_in_order_and_keep_them_while_they_decode():
    lanes = KVLanes(2, 8, _pool())
    a, b, c = _running(0, 5), _running(1, 3), _running(2, 4)
    assert lanes.assign([Scheduled.of(a, 5), Scheduled.of(b, 3), Scheduled.of(c, 4)]) == [0, 1, -1]  # no third
    a.num_cached, b.num_cached = 5, 3
    a.tokens.append(9)
    b.tokens.append(9)
    assert lanes.assign([Scheduled.of(a, 1), Scheduled.of(b, 1)]) == [0, 1]
    # c never started in a lane: its later chunk gets none, however lanes free up
    a.status = Status.FINISHED
    c.num_cached = 2
    assert lanes.assign([Scheduled.of(c, 2)]) == [-1]


def test_a_request_that_left_frees_its_lane_and_the_highest_lane_moves_down_with_its_contents():
    lanes = KVLanes(3, 8, _pool())
    reqs = [_running(i, 4) for i in range(3)]
    assert lanes.assign([Scheduled.of(r, 4) for r in reqs]) == [0, 1, 2]
    lanes.kv[:, :, 16:20] = 7.0  # lane 2's four positions
    for r in reqs:
        r.num_cached = 4
        r.tokens.append(5)
    reqs[0].status = Status.FINISHED
    assert lanes.assign([Scheduled.of(r, 1) for r in reqs[1:]]) == [1, 0]  # request 2 now in lane 0
    assert bool((lanes.kv[:, :, 0:4] == 7.0).all())


def test_a_preempted_request_loses_its_lane_and_recomputes_into_one():
    lanes = KVLanes(1, 8, _pool())
    r = _running(0, 4)
    assert lanes.assign([Scheduled.of(r, 4)]) == [0]
    r.num_cached, r.preemptions = 0, 1  # preempted and readmitted: from position 0 again
    assert lanes.assign([Scheduled.of(r, 4)]) == [0]
    r.num_cached = 4
    r.tokens.append(5)
    assert lanes.assign([Scheduled.of(r, 1)]) == [0]
    r.preemptions = 2  # preempted since, but scheduled as if its cache were still there: the lane is stale
    assert lanes.assign([Scheduled.of(r, 1)]) == [-1]


def test_lanes_grow_for_a_longer_request_and_keep_what_they_hold():
    lanes = KVLanes(2, 4, _pool())
    a, b = _running(0, 3), _running(1, 4)
    lanes.assign([Scheduled.of(a, 3), Scheduled.of(b, 4)])
    lanes.kv[:, :, 0:3] = 1.0
    lanes.kv[:, :, 4:8] = 2.0
    long = _running(2, 9)
    b.status = Status.FINISHED
    assert lanes.assign([Scheduled.of(long, 9)]) == [1]
    assert lanes.lane_slots >= 9
    keys, values = lanes.keys_values(1, 2, lanes.lane_slots)  # [lanes, kv heads, positions, head dim]
    assert keys.shape == (2, 1, lanes.lane_slots, 2)
    assert bool((keys[0, :, :3] == 1.0).all()) and bool((values[0, :, :3] == 1.0).all())
    assert bool((keys[0, :, 3:] == 0.0).all())
    assert bool((keys[1, :, :4] == 2.0).all()) and bool((keys[1, :, 4:] == 0.0).all())  # copied whole, stale or not


def test_packing_marks_a_step_dense_only_when_its_decode_rows_fill_lanes_0_to_b():
    reqs = [_running(i, 4, num_cached=4) for i in range(3)]
    blocks = BlockManager(16, 4, 1)
    for r in reqs:
        r.tokens.append(5)
        blocks.reserve(r, r.num_tokens)
    step = [Scheduled.of(r, 1) for r in reqs]
    cpu = torch.device("cpu")
    dense = PackedStep.build(step, 4, cpu, lanes=[0, 1, 2], lane_slots=8, scratch_slot=24)
    assert dense.dense and dense.decode_slots is None
    assert dense.lane_writes.tolist() == [4, 12, 20]
    gap = PackedStep.build(step, 4, cpu, lanes=[0, 2, 3], lane_slots=8, scratch_slot=32)
    assert not gap.dense and gap.decode_slots is not None
    assert not PackedStep.build(step, 4, cpu, lanes=[-1, 0, 1], lane_slots=8, scratch_slot=24).dense


def test_a_dense_decode_step_gathers_nothing(tiny_model):
    """With lanes, a decode step of every running request reads its keys as views: no index_select in it."""
    runner = ModelRunner(tiny_model.model, 4, suppress_ids=[eos_of(tiny_model)], few_rows=False)
    runner.allocate(64, batch_size=3)
    step = _decode_step(runner, BlockManager(64, 4, runner.bytes_per_block), 3)  # each prefilled alone: lanes 0..2

    class Gathers(_CountOps):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.count += func is torch.ops.aten.index_select.default
            return func(*args, **(kwargs or {}))

    with Gathers() as gathers:
        runner.run(step)
    assert gathers.count == 0
    runner.lanes = None  # the same step read from the pool gathers K and V on every layer
    with Gathers() as gathers:
        runner.run(step)
    assert gathers.count == 2 * len(runner.layers)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_lanes_give_the_pools_logits(tiny_model, seed, monkeypatch):
    """A run with lanes (the backend's way) and one without (the pool gathered): the same logits, step by step,
    through admissions, finishes and the moves they cause."""
    rng = random.Random(seed)
    shapes = [(rng.randrange(1, 20), rng.randrange(1, 8)) for _ in range(6)]
    prompts = [tuple(rng.randrange(1, tiny_model.vocab_size) for _ in range(p)) for p, _ in shapes]
    dense = []
    build = PackedStep.build.__func__
    monkeypatch.setattr(PackedStep, "build", classmethod(lambda cls, *a, **k: _noted(build(cls, *a, **k), dense)))

    def run(lanes: bool) -> dict[int, list[torch.Tensor]]:
        requests = [Request(i, prompt, t) for i, (prompt, (_, t)) in enumerate(zip(prompts, shapes))]
        runner = ModelRunner(tiny_model.model, 4, suppress_ids=[eos_of(tiny_model)], few_rows=False)
        if not lanes:
            runner.allocate = lambda num_blocks, batch_size=None: ModelRunner.allocate(runner, num_blocks)
        logits, _ = run_engine(runner, requests, SchedulerConfig(3), 40)
        return logits

    with_lanes = run(True)
    assert sum(dense) > 5  # most of its decode steps read lanes
    dense.clear()
    without = run(False)
    assert sum(dense) == 0
    for request_id, rows in without.items():
        assert len(with_lanes[request_id]) == len(rows)
        for mine, theirs in zip(with_lanes[request_id], rows):
            torch.testing.assert_close(mine, theirs, rtol=0, atol=1e-6)


def test_a_dense_decode_step_is_padded_to_the_packed_rows_and_writes_only_its_own():
    reqs = [_running(i, 4 + i, num_cached=4 + i) for i in range(3)]
    blocks = BlockManager(16, 4, 1)
    for r in reqs:
        r.tokens.append(5)
        blocks.reserve(r, r.num_tokens)
    cpu = torch.device("cpu")
    step = [Scheduled.of(r, 1) for r in reqs]
    p = PackedStep.build(step, 4, cpu, lanes=[0, 1, 2], lane_slots=8, scratch_slot=40, pad_to=5)
    assert p.input_ids.numel() == p.positions.numel() == 5 and p.rows == 3 and p.keep_all
    assert p.write_slots.numel() == p.lane_writes.numel() == 3
    mask = p.decode_mask  # [3, 1, 1, L]: the padding rows attend to nothing (the runner skips them)
    assert mask.shape == (3, 1, 1, 7)
    assert bool((mask[2, ..., :7] == 0).all()) and bool(torch.isinf(mask[0, ..., 5:]).all())
    # a step with a prompt in it is not padded (its matmuls run on oneDNN anyway)
    prompt = _running(3, 4)
    blocks.reserve(prompt, 4)
    mixed = PackedStep.build(step + [Scheduled.of(prompt, 4)], 4, cpu, lanes=[0, 1, 2, 3], lane_slots=8,
                             scratch_slot=40, pad_to=5)
    assert mixed.input_ids.numel() == mixed.rows == 7 and not mixed.keep_all
    # the decode rows' lane slots one by one, the prompt's as one span: rows 3..6 to lane 3's first slots
    assert mixed.lane_writes.numel() == 3 and mixed.lane_spans == ((3, 24, 4),)


def test_a_steps_kv_lands_in_the_lanes_decode_rows_by_slot_and_prompts_as_spans():
    lanes = KVLanes(2, 8, _pool())
    kv = torch.arange(2 * 5 * 2, dtype=torch.float32).view(2, 5, 1, 2)  # [K/V, rows, kv heads, head dim]
    # row 0 decodes into lane 1 position 3 (slot 11); rows 1..4 are a prompt starting lane 0 (slots 0..3)
    lanes.write(1, kv, torch.tensor([11]), [(1, 0, 4)])
    written = lanes.layers[1]
    assert torch.equal(written[:, 11], kv[:, 0]) and torch.equal(written[:, 0:4], kv[:, 1:5])
    assert bool((lanes.layers[0] == 0).all())  # another layer untouched
    keys, values = lanes.keys_values(1, 2, 4)
    assert torch.equal(keys[1, 0, 3], kv[0, 0, 0]) and torch.equal(values[0, 0, :4], kv[1, 1:5, 0])
