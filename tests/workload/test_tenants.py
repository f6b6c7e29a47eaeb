"""A tenants file: merged arrivals with tenant, priority and SLOs; every bad field refused by name."""

from __future__ import annotations

from pathlib import Path

import pytest

from batchperf.measure.metrics import SLO
from batchperf.workload.spec import LengthSpec, WorkloadSpec
from batchperf.workload.traffic import parse_workload

BASE = WorkloadSpec(num_prompts=8, prompt_len=LengthSpec(16, 16))
GOOD = """
[tenants.chat]
requests = 6
rate = 4.0
burstiness = 0.5
prompt_len = "8-16"
output_lens = [2, 3]
slo = { ttft_ms = 200, tpot_ms = 50 }

[tenants.batch]
requests = 3
rate = 1.0
on_s = 0.5
off_s = 2.0
prompt_len = 32
priority = 1
slo = { e2el_ms = 9000 }
"""


def build(tmp_path: Path, text: str, load: float = 1.0):  # noqa: ANN201
    path = tmp_path / "tenants.toml"
    path.write_text(text)
    return parse_workload(f"tenants:{path}", BASE, load=load).build(1000, 512)


def test_tenants_are_merged_by_send_time_with_their_priority_and_slos(tmp_path: Path) -> None:
    w = build(tmp_path, GOOD)
    assert len(w.requests) == 9 and w.open_loop and w.kind == "tenants"
    assert [r.offset for r in w.requests] == sorted(r.offset for r in w.requests)
    assert {r.tenant for r in w.requests} == {"chat", "batch"}
    assert all(r.priority == (1 if r.tenant == "batch" else 0) for r in w.requests)
    assert w.slos == {"chat": SLO(200, 50, None), "batch": SLO(None, None, 9000)}
    batch = [r.offset for r in w.requests if r.tenant == "batch"]
    assert all(t % 2.5 < 0.5 for t in batch)  # only in the on periods


def test_the_load_factor_scales_every_tenants_rate(tmp_path: Path) -> None:
    one, two = build(tmp_path, GOOD), build(tmp_path, GOOD, load=2.0)
    chat1 = [r.offset for r in one.requests if r.tenant == "chat"]
    chat2 = [r.offset for r in two.requests if r.tenant == "chat"]
    assert chat2 == pytest.approx([t / 2 for t in chat1])


@pytest.mark.parametrize(("change", "match"), [
    (("rate = 4.0", "rate = 4.0\ncolour = 1"), r"tenant 'chat': unknown field\(s\) colour"),
    (("ttft_ms = 200", "ttft_ms = 0"), r"tenant 'chat': slo.ttft_ms is 0; it must be a finite number > 0"),
    (("e2el_ms = 9000", "e2el_ms = -5"), r"tenant 'batch': slo.e2el_ms is -5"),
    (("ttft_ms = 200", "ttft_ms = inf"), r"slo.ttft_ms is inf"),
    (("ttft_ms = 200", "p99_ms = 200"), r"unknown slo field\(s\) p99_ms"),
    (("rate = 4.0", "rate = 0"), r"tenant 'chat': rate is 0"),
    (("requests = 6", "requests = 1.5"), r"requests is 1.5; it must be a whole number"),
    (("off_s = 2.0", ""), "on/off bursts need both on_s and off_s"),
    (("[tenants.chat]", "flavour = 1\n[tenants.chat]"), r"unknown field\(s\) flavour"),
])
def test_a_bad_tenants_file_names_the_tenant_and_the_field(tmp_path: Path, change: tuple[str, str], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        build(tmp_path, GOOD.replace(*change, 1))


def test_a_file_without_tenants_or_not_toml_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"no \[tenants.NAME\] table"):
        build(tmp_path, "seed = 1\n")
    with pytest.raises(ValueError, match="not TOML"):
        build(tmp_path, "[tenants\n")


def test_the_warm_up_runs_on_the_priority_policy_of_the_measured_requests(tmp_path: Path) -> None:
    """Warm-up requests all have priority 0; they must still warm the engine (or server) the measured requests
    need, not build one of their own."""
    w = build(tmp_path, GOOD)
    assert w.uses_priority and all(r.priority == 0 for r in w.warmup) and w.warmup_only().uses_priority
    assert not build(tmp_path, GOOD.replace("priority = 1", "priority = 0")).warmup_only().uses_priority
