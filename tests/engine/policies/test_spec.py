"""``--batchperf-policies`` entries: names, parameters, ranges, the normalised text and label."""

from __future__ import annotations

import pytest

from batchperf.engine.policies import KNOWN_POLICIES, PolicyContext, parse_policy
from batchperf.engine.policies.fcfs import Fcfs


def test_the_known_policies_are_the_issues_five():
    assert KNOWN_POLICIES == ("fcfs", "seed", "aimd", "priority", "fair")


def test_fcfs_is_the_default_and_builds_a_policy_with_the_cells_batch_size():
    spec = parse_policy(" fcfs ")
    assert (spec.name, spec.text, spec.label, spec.is_default, dict(spec.params)) == ("fcfs", "fcfs", "fcfs", True, {})
    policy = spec.build(PolicyContext(batch_size=6))
    assert isinstance(policy, Fcfs) and policy.cap([], []) == 6


def test_unknown_policy_names_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown policy 'lifo'.*known policies: fcfs, seed, aimd, priority, fair"):
        parse_policy("lifo")


def test_fcfs_takes_no_parameters():
    with pytest.raises(ValueError, match="unknown parameter 'cap'; fcfs takes no parameters"):
        parse_policy("fcfs:cap=3")


@pytest.mark.parametrize("text", ["fcfs:", "fcfs:cap", "fcfs:=3"])
def test_a_malformed_parameter_list_says_how_to_write_one(text):
    with pytest.raises(ValueError, match="is not k=v; write NAME:k=v,k=v"):
        parse_policy(text)


def test_policy_context_rejects_a_batch_size_below_one():
    with pytest.raises(ValueError, match="batch_size must be an integer >= 1, got 0"):
        PolicyContext(batch_size=0)


def test_specs_compare_and_hash_by_their_normalised_text():
    a, b = parse_policy("aimd:step=1,decrease=0.70"), parse_policy("aimd: decrease=.7 , step=1")
    assert a == b and hash(a) == hash(b) and len({a, b, parse_policy("aimd")}) == 2
    assert a.given == {"decrease": 0.7, "step": 1} and a.params["window"] == 4


def test_every_policy_builds_fresh_state_per_run():
    spec, ctx = parse_policy("fair"), PolicyContext(2)
    first, second = spec.build(ctx), spec.build(ctx)
    first.counters["a"] = 5.0
    assert first is not second and second.counters["a"] == 0.0
