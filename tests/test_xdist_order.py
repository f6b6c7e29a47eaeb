"""How ``make test`` deals its modules out to the xdist workers (tests/support/xdist_order.py)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from paths import SUPPORT
from xdist_order import slow_modules_first


@dataclass
class FakeItem:
    nodeid: str
    slow: bool = False

    def get_closest_marker(self, name: str) -> object:
        return object() if name == "slow" and self.slow else None


def test_modules_with_a_slow_test_go_first_each_module_kept_together_in_order() -> None:
    items = [FakeItem("a.py::t1"), FakeItem("a.py::t2"), FakeItem("b.py::t1"), FakeItem("b.py::t2", slow=True),
             FakeItem("c.py::t1"), FakeItem("d.py::C::t1", slow=True), FakeItem("d.py::C::t2")]
    assert [i.nodeid for i in slow_modules_first(items)] == [
        "b.py::t1", "b.py::t2", "d.py::C::t1", "d.py::C::t2", "a.py::t1", "a.py::t2", "c.py::t1"]


def test_the_worker_takes_the_slow_module_first_not_the_one_with_most_tests(pytester: pytest.Pytester,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """On one xdist worker the modules run in the order they are dealt out: the slow module, collected last, goes
    first (xdist's default would send the module with the most tests first; collection order, the other one)."""
    pytest.importorskip("xdist")
    monkeypatch.setenv("PYTHONPATH", str(SUPPORT))
    pytester.makeini("[pytest]\nmarkers =\n    slow: takes more than a few seconds\n")
    pytester.makeconftest("from xdist_order import pytest_collection_modifyitems, pytest_xdist_make_scheduler\n")
    pytester.makepyfile(test_many="\n".join(f"def test_{i}(): pass" for i in range(5)),
                        test_zlong="import pytest\n\n@pytest.mark.slow\ndef test_long(): pass\n\ndef test_next(): pass")
    result = pytester.runpytest_subprocess("-n", "1", "-v", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=7)
    ran = [line.split()[-1] for line in result.outlines if " PASSED " in line]
    assert ran[:2] == ["test_zlong.py::test_long", "test_zlong.py::test_next"], result.outlines
