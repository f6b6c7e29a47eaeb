"""Decode MBU and prefill MFU from raw traces, against hand-computed values; the device table."""

from __future__ import annotations

import pytest

from batchperf.measure.devices import PEAKS, device_peak
from batchperf.measure.efficiency import ModelCost, efficiency, steps_of
from batchperf.measure.trace import RequestTrace, RunTrace

COST = ModelCost(weight_bytes=1000, layer_params=100, lm_head_params=10, attn_width=4, layers=2, kv_bytes_per_token=8)


def trace(backend: str, *requests: tuple[int, float, tuple[float, ...]]) -> RunTrace:
    """Requests as (prompt length, scheduled, token times)."""
    reqs = [RequestTrace(i, p, len(times), 0.0, s, times) for i, (p, s, times) in enumerate(requests)]
    return RunTrace(backend, 2, 2, reqs, end=max(t for _, _, ts in requests for t in ts))


# a static batch of two 10-token prompts scheduled at 0.0; one stops counting after 2 tokens, the other after 3
STATIC = trace("hf-static", (10, 0.0, (1.0, 1.1, 1.2)), (10, 0.0, (1.0, 1.1)))


def test_steps_are_the_distinct_token_times() -> None:
    steps = steps_of(STATIC)
    assert [s.end for s in steps] == [1.0, 1.1, 1.2]
    assert steps[0].prompts == [10, 10] and steps[0].start == 0.0
    assert steps[1].contexts == [11, 11]  # feeding token 1 reads the 10 prompt keys and itself
    assert steps[2].contexts == [12]


def test_hand_computed_mbu_and_mfu_on_a_known_device() -> None:
    out = efficiency([STATIC], COST, "NVIDIA H200", "bfloat16")
    # decode: (1000 + 8 x 22) + (1000 + 8 x 12) bytes in 0.1 + 0.1 s
    assert out["decode_steps"] == 2
    assert out["decode_bandwidth_bytes_per_s"] == pytest.approx(2272 / 0.2)
    assert out["decode_mbu"] == pytest.approx(2272 / 0.2 / 4.8e12)
    # prefill: per prompt 2 x 100 x 10 (layers) + 2 x 4 x 10 x 11 x 2 (causal attention) + 2 x 10 (one LM-head row)
    assert out["prefill_steps"] == 1
    assert out["prefill_flops_per_s"] == pytest.approx(2 * 3780 / 1.0)
    assert out["prefill_mfu"] == pytest.approx(7560 / 989.5e12)
    assert out["peak_source"] == "NVIDIA H200 datasheet"


def test_a_mixed_step_counts_as_prefill_and_starts_at_its_admission() -> None:
    # continuous: request 0 decodes while request 1 (admitted at 1.05, after step 1.0 ended) runs its prompt
    mixed = trace("continuous", (4, 0.0, (1.0, 1.5, 1.6)), (6, 1.05, (1.5, 1.6)))
    out = efficiency([mixed], COST, "cpu", "float32")
    prefill = COST.prefill_flops(4) + COST.prefill_flops(6) + COST.decode_flops(5)
    assert out["prefill_steps"] == 2  # 0.0 -> 1.0, then 1.05 -> 1.5 (its decode row's FLOPs included)
    assert out["prefill_flops_per_s"] == pytest.approx(prefill / (1.0 + 0.45))
    assert out["decode_bandwidth_bytes_per_s"] == pytest.approx((1000 + 8 * (6 + 7)) / 0.1)
    assert out["decode_mbu"] is None and out["prefill_mfu"] is None  # no peaks for a CPU: achieved rates only
    assert "no peak figures for 'cpu'" in out["peak_source"]


def test_rounds_pool_their_steps() -> None:
    one, two = efficiency([STATIC], COST, "NVIDIA L4", "float16"), efficiency([STATIC, STATIC], COST, "NVIDIA L4", "float16")
    assert two["decode_steps"] == 2 * one["decode_steps"] and two["decode_mbu"] == pytest.approx(one["decode_mbu"])


def test_backends_without_per_step_times_get_no_ratios() -> None:
    out = efficiency([trace("vllm-server", (10, 0.0, (1.0, 1.1)))], COST, "NVIDIA H100 80GB HBM3", "bfloat16")
    assert "decode_mbu" not in out and "not one per engine step" in out["note"]


def test_float32_has_no_flops_peak() -> None:
    out = efficiency([STATIC], COST, "NVIDIA A100-SXM4-80GB", "float32")
    assert out["prefill_mfu"] is None and out["decode_mbu"] == pytest.approx(2272 / 0.2 / 2.039e12)


@pytest.mark.parametrize(("name", "board"), [
    ("NVIDIA H200", "H200 SXM"), ("NVIDIA H200 NVL", "H200 NVL"), ("NVIDIA H100 80GB HBM3", "H100 SXM"),
    ("NVIDIA H100 PCIe", "H100 PCIe"), ("NVIDIA H100 NVL", "H100 NVL"), ("NVIDIA A100-SXM4-80GB", "A100 80GB SXM"),
    ("NVIDIA A100 80GB PCIe", "A100 80GB PCIe"), ("NVIDIA A100-SXM4-40GB", "A100 40GB"),
    ("NVIDIA A100-PCIE-40GB", "A100 40GB"), ("NVIDIA L4", "L4"), ("NVIDIA L40S", "L40S"), ("NVIDIA A10", "A10"),
])
def test_device_names_find_their_board(name: str, board: str) -> None:
    peak = device_peak(name)
    assert peak is not None and peak.name == board


@pytest.mark.parametrize("name", ["cpu", "NVIDIA A10G", "NVIDIA H100 80GB HBM3 MIG 1g.10gb", "Tesla T4"])
def test_unknown_devices_and_mig_slices_have_no_peaks(name: str) -> None:
    assert device_peak(name) is None


def test_every_peak_is_plausible_and_sourced() -> None:
    for _, peak in PEAKS:
        assert 0.1e12 < peak.bandwidth_bytes_per_s < 10e12 and 50e12 < peak.dense_16bit_flops_per_s < 2000e12
        assert peak.source.startswith("NVIDIA ")


def test_model_cost_of_the_tiny_model_matches_its_shape(tiny_model) -> None:
    cost = tiny_model.cost()
    c = tiny_model.config  # tied embeddings: the LM head is the embedding matrix, read once per step
    per_layer = 256 * (8 * 32) + 2 * 256 * (2 * 32) + (8 * 32) * 256 + 3 * 256 * 1024  # q, k, v, o, mlp
    assert cost.layer_params == 4 * per_layer
    assert cost.lm_head_params == c.vocab_size * 256
    biases_and_norms = 4 * ((8 + 2 + 2) * 32 + 2 * 256) + 256
    assert cost.weight_bytes == 4 * (4 * per_layer + c.vocab_size * 256 + biases_and_norms)
    assert (cost.attn_width, cost.layers, cost.kv_bytes_per_token) == (8 * 32, 4, 2 * 4 * 2 * 32 * 4)
