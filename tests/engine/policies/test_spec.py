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
