"""A policy's context: tenant targets, validated, and the per-step latency target derived from them."""

from __future__ import annotations

import math

import pytest

from batchperf.engine.policies import Param, PolicyContext, TenantTargets


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"tpot_ms": 0.0}, "tpot_ms must be a finite number > 0"),
    ({"ttft_ms": math.inf}, "ttft_ms must be a finite number > 0"),
    ({"e2el_ms": -5.0}, "e2el_ms must be a finite number > 0"),
    ({"weight": 0.0}, "weight must be a finite number > 0"),
    ({"weight": math.nan}, "weight must be a finite number > 0"),
])
def test_tenant_targets_reject_what_no_slo_can_mean(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TenantTargets(**kwargs)


def test_the_step_target_is_the_tightest_tpot_or_half_the_tightest_ttft():
    tenants = {"chat": TenantTargets(ttft_ms=200, tpot_ms=50), "batch": TenantTargets(ttft_ms=2000, tpot_ms=80)}
    assert PolicyContext(4, tenants).step_target_ms() == 50
    assert PolicyContext(4, {"chat": TenantTargets(ttft_ms=60, tpot_ms=50)}).step_target_ms() == 30
    assert PolicyContext(4, {"": TenantTargets(ttft_ms=300)}).step_target_ms() == 150
    assert PolicyContext(4, {"": TenantTargets(e2el_ms=900)}).step_target_ms() is None  # no per-step bound
    assert PolicyContext(4).step_target_ms() is None


@pytest.mark.parametrize(("param", "value", "message"), [
    (Param(int, 1, "a cap", low=1), 0, r"must be in \[1, inf\), got 0"),
    (Param(int, 1, "a cap", low=1), 2.5, "must be an integer"),
    (Param(float, 0.5, "a factor", low_open=True, high=1, high_open=True), 1.0, r"must be in \(0, 1\), got 1.0"),
    (Param(float, 0.5, "a factor", low_open=True, high=1, high_open=True), math.nan, "must be finite"),
    (Param(float, 1.0, "ms", low_open=True), math.inf, "must be finite"),
])
def test_a_parameter_outside_its_range_names_the_bound(param, value, message):
    with pytest.raises(ValueError, match=f"p: x {message}"):
        param.check("p", "x", value)
    assert param.check("p", "x", param.default) == param.default
