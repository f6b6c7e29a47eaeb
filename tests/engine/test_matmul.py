"""The runner's CPU matmuls (batchperf.engine.matmul) against ``F.linear``."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from batchperf.engine import matmul
from batchperf.engine.matmul import FewRows, few_rows_supported


@pytest.mark.skipif(not few_rows_supported(torch.device("cpu"), torch.float32),
                    reason="MKL's packed GEMM for few rows runs on an Intel CPU (MKL built in)")
@pytest.mark.parametrize("rows", [0, 1, 3, 8])
@pytest.mark.parametrize("bias", [False, True])
def test_few_rows_is_f_linear_for_any_rows_up_to_the_packed_count(rows, bias):
    """Packed for 8 rows: 8 rows go straight to MKL, fewer are padded to 8, and every row (and the padding, which
    holds the rows of an earlier, larger call) leaves the others unchanged."""
    torch.manual_seed(rows)
    few = FewRows(8)
    weight, b = torch.randn(96, 64), torch.randn(96) if bias else None
    packed = few.pack(weight)
    few.linear(torch.randn(8, 64) * 100, packed, b)  # leaves large rows in the pad buffer
    x = torch.randn(rows, 64)
    got = few.linear(x, packed, b)
    assert got.shape == (rows, 96)
    torch.testing.assert_close(got, F.linear(x, weight, b), rtol=1e-5, atol=1e-5)


def test_few_rows_refuses_a_count_below_one():
    with pytest.raises(ValueError, match="rows must be >= 1, got 0"):
        FewRows(0)


@pytest.mark.parametrize("text,vendor", [
    ("processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\n", "GenuineIntel"),
    ("processor\t: 0\nvendor_id\t: AuthenticAMD\n", "AuthenticAMD"),
    ("processor\t: 0\nmodel name\t: something else\n", ""),
])
def test_the_cpu_vendor_is_read_from_cpuinfo(text, vendor, tmp_path, monkeypatch):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(text)
    real_path = matmul.Path
    monkeypatch.setattr(matmul, "Path", lambda p: cpuinfo if p == "/proc/cpuinfo" else real_path(p))
    matmul.cpu_vendor.cache_clear()
    try:
        assert matmul.cpu_vendor() == vendor
    finally:
        matmul.cpu_vendor.cache_clear()


def test_only_an_intel_cpu_in_float32_gets_few_rows(monkeypatch):
    monkeypatch.setattr(matmul, "cpu_vendor", lambda: "GenuineIntel")
    assert few_rows_supported(torch.device("cpu"), torch.float32) == torch.backends.mkl.is_available()
    assert not few_rows_supported(torch.device("cpu"), torch.bfloat16)
    assert not few_rows_supported(torch.device("meta"), torch.float32)
    monkeypatch.setattr(matmul, "cpu_vendor", lambda: "AuthenticAMD")
    assert not few_rows_supported(torch.device("cpu"), torch.float32)
