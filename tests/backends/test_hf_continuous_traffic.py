"""``hf-continuous`` (transformers' continuous batching) runs every workload kind (issue 24): shared prefixes, two
tenants, a trace; priority ignored."""

from __future__ import annotations

import pytest
from small_runs import MINI_TRACE, TWO_TENANTS, check_serves_every_kind_ignoring_priority, measured_cell


@pytest.mark.parametrize(("kind", "entry"), [("prefix", "prefix:2:32"), ("tenants", TWO_TENANTS),
                                             ("trace", MINI_TRACE)])
def test_hf_continuous_runs_the_workload_in_full_and_says_it_ignores_priority(tiny_model, kind, entry) -> None:
    record = measured_cell(tiny_model, "hf-continuous", batch_size="4", concurrency="4", workload=entry)
    check_serves_every_kind_ignoring_priority(record, kind, "hf-continuous")
