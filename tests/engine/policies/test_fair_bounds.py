"""Issue 38: fair's per-token charges are bounded, so its counters (written in the record's policy state) stay
finite; before, ``fair:w_in=1e308`` was accepted and wrote Infinity into the results JSON."""

from __future__ import annotations

import pytest

from batchperf.engine.policies import parse_policy


@pytest.mark.parametrize("text", ["fair:w_in=1e308", "fair:w_out=1e300", "fair:w_in=1000001"])
def test_a_charge_beyond_the_bound_is_refused_when_parsed(text: str) -> None:
    with pytest.raises(ValueError, match=r"fair: w_(in|out) must be at most 1e\+06 .*far within a float"):
        parse_policy(text)


def test_charges_within_the_bound_are_kept() -> None:
    assert parse_policy("fair:w_in=1e6,w_out=0.5").params["w_in"] == 1e6
