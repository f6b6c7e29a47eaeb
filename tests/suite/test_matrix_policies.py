"""The policy axis (issue 27): ``--batchperf-policies``, ids, the cell's record, bad entries, the tiers' cells."""

from __future__ import annotations

from dataclasses import replace

import pytest

from batchperf.suite.matrix import TIERS, CellParams, narrowed, split_policies

TWO = "tenants:fixtures/traffic/two_tenants.toml"


def base() -> CellParams:
    return CellParams("cpu", "cpu", "m", "continuous", "4", "64", "4", "16", 2, 1, "closed", workload=TWO)


def test_fcfs_keeps_the_cell_id_and_record_and_another_policy_is_named() -> None:
    """The default fcfs is no new cell (its id and baseline key stay); aimd is a cell of its own, its policy in
    the cell's parameters (and so in its identity)."""
    fcfs = base()
    assert fcfs.id.endswith("-wtenants-two_tenants-8a6ba413") and "-pol" not in fcfs.id
    assert "policy" not in fcfs.resolve().describe()
    aimd = replace(fcfs, policy="aimd")
    assert aimd.id == fcfs.id + "-polaimd" and aimd.resolve().describe()["policy"] == "aimd"
    assert aimd.resolve().policy.name == "aimd" and fcfs.resolve().policy.is_default


def test_the_policies_axis_multiplies_the_cells_and_drops_the_tiers_own_traffic_cells() -> None:
    tier = narrowed(TIERS["cpu"], backends="continuous", batch_sizes="4", prompt_lens="64", concurrency="4",
                    workloads=TWO, policies="fcfs,aimd,priority")
    ids = [c.id for c in tier.cells()]
    assert len(ids) == 3 and ids[0].endswith("8a6ba413") and ids[1].endswith("-polaimd")
    assert ids[2].endswith("-polpriority")


def test_policy_parameters_keep_their_commas() -> None:
    assert split_policies("fcfs, aimd:decrease=0.5,step=2 ,priority") == ("fcfs", "aimd:decrease=0.5,step=2",
                                                                           "priority")
    tier = narrowed(TIERS["cpu"], backends="continuous", batch_sizes="4", prompt_lens="64", concurrency="4",
                    workloads=TWO, policies="aimd:decrease=0.5,priority")
    assert tier.policies == ("aimd:decrease=0.5", "priority")


@pytest.mark.parametrize(("entry", "message"), [
    ("bogus", "unknown policy 'bogus'.*known policies: fcfs, seed, aimd, priority, fair"),
    ("aimd:decrease=1.5", "decrease must be in"),
    ("aimd:decrease=nan", "decrease must be finite"),
    ("aimd:nosuch=1", "unknown parameter 'nosuch'"),
    ("", "no policy given"),
])
def test_a_bad_entry_is_refused_before_any_cell_naming_the_known(entry: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        narrowed(TIERS["cpu"], policies=entry)


def test_the_cpu_tier_runs_policy_cells_on_the_two_tenants_and_vllms_priority() -> None:
    cells = [c for c in narrowed(TIERS["cpu"], slice="ci").cells() if "-pol" in c.id]
    assert {(c.backend, c.policy) for c in cells} == {("continuous", "aimd"), ("continuous", "priority"),
                                                       ("vllm", "priority")}
    assert all(c.workload == TWO for c in cells)


def test_the_gpu_tier_gets_the_same_policy_cells_at_its_scale() -> None:
    cells = [c for c in TIERS["gpu"].cells() if "two_tenants_gpu" in c.workload]
    assert {(c.backend, c.policy) for c in cells} >= {("continuous", p) for p in ("fcfs", "seed", "aimd", "priority",
                                                                                   "fair")}
    assert {("vllm", "fcfs"), ("vllm", "priority")} <= {(c.backend, c.policy) for c in cells}
    for cell in cells:
        assert cell.resolve().policy.name == cell.policy.split(":")[0]
