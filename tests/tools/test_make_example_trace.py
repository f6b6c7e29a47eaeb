"""tools/make_example_trace.py makes exactly the traffic fixtures the tiers use (their hashes are in cell ids)."""

from __future__ import annotations

from paths import REPO
from tool_module import tool_module

FIXTURES = REPO / "fixtures" / "traffic"


def test_the_script_remakes_every_fixture_byte_for_byte(tmp_path, monkeypatch) -> None:
    with tool_module("make_example_trace") as tool:
        monkeypatch.setattr(tool, "OUT", tmp_path)
        tool.main()
    made = sorted(p.name for p in tmp_path.iterdir())
    assert made == sorted(p.name for p in FIXTURES.iterdir())
    assert {"gpu_trace.jsonl", "two_tenants_gpu.toml"} <= set(made)
    for name in made:
        assert (tmp_path / name).read_bytes() == (FIXTURES / name).read_bytes(), name
