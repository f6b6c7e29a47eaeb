"""tools/make_example_trace.py makes exactly the traffic fixtures the tiers use (their hashes are in cell ids)."""

from __future__ import annotations

import importlib.util

from paths import REPO

FIXTURES = REPO / "fixtures" / "traffic"


def test_the_script_remakes_every_fixture_byte_for_byte(tmp_path, monkeypatch) -> None:
    spec = importlib.util.spec_from_file_location("make_example_trace", REPO / "tools" / "make_example_trace.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    monkeypatch.setattr(tool, "OUT", tmp_path)
    tool.main()
    made = sorted(p.name for p in tmp_path.iterdir())
    assert made == sorted(p.name for p in FIXTURES.iterdir())
    assert {"gpu_trace.jsonl", "two_tenants_gpu.toml"} <= set(made)
    for name in made:
        assert (tmp_path / name).read_bytes() == (FIXTURES / name).read_bytes(), name
