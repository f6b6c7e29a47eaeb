"""The cell matrix: ids, narrowing from the command line, per-cell validation."""

import pytest

from batchperf.suite.matrix import TIERS, narrowed, parse_arrival, split_list


def test_default_cpu_matrix_with_readable_ids() -> None:
    """27 cells each for hf-static and continuous; the peers on their few cells (the tier's limits); the traffic cells
    (issue 24) and the policy cells (issue 27) on top, each named by its workload (and policy): five traffic cells on
    continuous and vllm, the three kinds on each of the transformers backends, the policy cells, and vLLM's long-prompt
    cell (p2048, where chunked prefill shows: issue 37)."""
    ids = [c.id for c in TIERS["cpu"].cells()]
    assert len(ids) == len(set(ids)) == 27 * 2 + 2 * 3 + 5 + 2 + 2 * 3 + 1
    assert len([i for i in ids if "-w" in i]) == 13
    assert len([i for i in ids if "-pol" in i]) == 3
    assert "cpu-tiny-qwen2-vllm-bs4-p32-c4-wprefix2x128" in ids
    assert "cpu-tiny-qwen2-hf-static-bs8-p512-c16" in ids and "cpu-tiny-qwen2-continuous-bs1-p64-c4" in ids
    assert {i for i in ids if "vllm-bs" in i and "-w" not in i} == {
        "cpu-tiny-qwen2-vllm-bs4-p64-c4",
        "cpu-tiny-qwen2-vllm-bs4-p64-c16",
        "cpu-tiny-qwen2-vllm-bs4-p2048-c16",
    }


def test_an_axis_from_the_command_line_replaces_a_backends_limit() -> None:
    tier = narrowed(TIERS["cpu"], backends="vllm", batch_sizes="1,8")
    assert [c.id for c in tier.cells()] == [f"cpu-tiny-qwen2-vllm-bs{b}-p64-c{c}" for b in (1, 8) for c in (4, 16)]


def test_narrowing_replaces_axes() -> None:
    tier = narrowed(TIERS["cpu"], backends="hf-static", batch_sizes="1,8", prompt_lens="64", concurrency=None, num_prompts="4")
    assert tier.batch_sizes == ("1", "8") and tier.prompt_lens == ("64",) and tier.concurrency == ("4", "8", "16")
    assert tier.num_prompts == 4 and len(tier.cells()) == 6


def test_prompt_mix_keeps_its_commas_in_brackets() -> None:
    assert split_list("64,[64,256,512],64-128") == ("64", "64,256,512", "64-128")


def test_a_bad_entry_fails_only_its_own_cells() -> None:
    cells = narrowed(TIERS["cpu"], backends="hf-static", batch_sizes="4,x", prompt_lens="64", concurrency="4").cells()
    good, bad = cells
    assert good.resolve().batch_size == 4
    with pytest.raises(ValueError, match="invalid batch size 'x'"):
        bad.resolve()


@pytest.mark.parametrize(("axis", "value", "message"), [
    ("concurrency", "0", "invalid concurrency '0'"),
    ("prompt_lens", "-64", "prompt length must be >= 1"),
    ("batch_sizes", "2.5", "invalid batch size '2.5'"),
])
def test_bad_entries_are_named(axis: str, value: str, message: str) -> None:
    (cell,) = narrowed(TIERS["cpu"], **{"backends": "hf-static", "batch_sizes": "1", "prompt_lens": "64",
                                        "concurrency": "4", axis: value}).cells()
    with pytest.raises(ValueError, match=message):
        cell.resolve()


def test_resolved_cell_describes_itself() -> None:
    cell = TIERS["cpu"].cells()[0].resolve()
    d = cell.describe()
    assert d["id"] == cell.id and d["batch_size"] == cell.batch_size and d["num_warmup"] == 1


@pytest.mark.parametrize(("text", "kind", "rate"), [("closed", "closed", float("inf")), ("burst", "burst", float("inf")),
                                                   ("rate:4", "rate", 4.0), ("rate:4:0.5", "rate", 4.0)])
def test_arrival_specs(text: str, kind: str, rate: float) -> None:
    a = parse_arrival(text)
    assert (a.kind, a.rate) == (kind, rate)


@pytest.mark.parametrize("text", ["poisson", "rate", "rate:x", "closed:3"])
def test_bad_arrival_specs(text: str) -> None:
    with pytest.raises(ValueError, match="arrival"):
        parse_arrival(text)


def test_bad_global_setting_is_rejected() -> None:
    with pytest.raises(ValueError, match="num_prompts"):
        narrowed(TIERS["cpu"], num_prompts="zero")


def test_tp_is_an_axis_of_vllm_cells_only() -> None:
    tier = narrowed(TIERS["gpu"], models="m", backends="hf-static,vllm", batch_sizes="8", prompt_lens="128",
                    concurrency="16", tp="1,2")
    ids = [c.id for c in tier.cells()]
    assert ids == ["gpu-m-hf-static-bs8-p128-c16", "gpu-m-vllm-bs8-p128-c16", "gpu-m-vllm-bs8-p128-c16-tp2"]
    hf, _, vllm2 = (c.resolve() for c in tier.cells())
    assert "tp" not in hf.describe() and hf.tp == 1  # other backends' identity (and baselines) unchanged
    assert vllm2.tp == 2 and vllm2.describe()["tp"] == 2


def test_default_tp_is_one() -> None:
    assert TIERS["gpu"].tp == ("1",) and all(c.tp == "1" for c in TIERS["gpu"].cells())


def test_bad_tp_fails_its_cell() -> None:
    (cell,) = narrowed(TIERS["gpu"], models="m", backends="vllm", batch_sizes="8", prompt_lens="128",
                       concurrency="16", tp="two").cells()
    with pytest.raises(ValueError, match="invalid tensor-parallel size 'two'"):
        cell.resolve()


def test_the_ci_slice_keeps_every_backend_every_workload_kind_the_kv_fit_and_the_cell_ids() -> None:
    whole = {c.id for c in TIERS["cpu"].cells()}
    cells = narrowed(TIERS["cpu"], slice="ci").cells()
    ids = {c.id for c in cells}
    assert ids < whole  # a subset, same ids: the same baselines
    assert {c.backend for c in cells} == set(TIERS["cpu"].backends)
    assert {c.workload.split(":")[0] for c in cells} == {"synthetic", "prefix", "tenants", "trace"}
    for backend in ("hf-static", "continuous"):  # two prompt lengths each: the KV-growth check can fit a slope
        assert {c.prompt_len for c in cells if c.backend == backend and c.workload == "synthetic"} == {"64", "512"}
    assert "cpu-tiny-qwen2-vllm-server-bs4-p64-c16" in ids
    # the transformers backends' traffic cells are the whole tier's only: CI's slice is near its budget
    # five traffic cells and the two policy cells (continuous on the two tenants under aimd and priority)
    assert not [i for i in ids if "-w" in i and "-hf-" in i] and len([i for i in ids if "-w" in i]) == 7
    assert len([i for i in ids if "-pol" in i]) == 3  # those two and vLLM's two-tenant cell under its priority


def test_every_backend_runs_every_workload_kind_in_the_whole_cpu_tier() -> None:
    cells = TIERS["cpu"].cells()
    kinds = {(c.backend, c.workload.split(":")[0]) for c in cells}
    for backend in ("hf-static", "hf-continuous"):
        assert {k for b, k in kinds if b == backend} == {"synthetic", "prefix", "tenants", "trace"}
    assert all(c.resolve().traffic is not None for c in cells if c.workload != "synthetic")


def test_the_gpu_tier_has_every_workload_kind_at_its_scale() -> None:
    """Shared prefixes (whole 16-token GPU blocks), two tenants at GPU rates and a trace replay, on vllm and
    continuous (the backends that take priority), for each model of the tier; each resolves (its file is there)."""
    gpu = TIERS["gpu"]
    every = [c for c in gpu.cells() if c.workload != "synthetic"]
    traffic = [c for c in every if c.policy == "fcfs"]
    assert len(traffic) == len(gpu.models) * 2 * 3
    # issue 27: the tenants under continuous's four other policies and vLLM's priority, at the same scale
    policies = {(c.backend, c.policy) for c in every if c.policy != "fcfs"}
    assert policies == {("continuous", p) for p in ("seed", "aimd", "priority", "fair")} | {("vllm", "priority")}
    assert len(every) == len(gpu.models) * (2 * 3 + 5)
    assert {(c.backend, c.workload.split(":")[0]) for c in traffic} == {
        (b, k) for b in ("vllm", "continuous") for k in ("prefix", "tenants", "trace")}
    for cell in traffic:
        resolved = cell.resolve()
        assert resolved.concurrency >= 256 and resolved.traffic is not None, cell.id
        if cell.workload.startswith("prefix:"):
            assert int(cell.workload.split(":")[2]) % 16 == 0  # vLLM's block on a GPU: the whole prefix is cached
    ids = {c.id for c in traffic}
    assert "gpu-qwen2.5-0.5b-vllm-bs32-p512-c256-wprefix4x1024" in ids
    assert any("-wtenants-two_tenants_gpu-" in i for i in ids) and any("-wtrace-gpu_trace-" in i for i in ids)
    # an axis from the command line (ci/gpu_check.sh gives several) replaces them, as on the CPU tier
    assert not [c for c in narrowed(gpu, concurrency="64").cells() if c.workload != "synthetic"]


def test_an_axis_given_beside_the_slice_replaces_its_limit() -> None:
    tier = narrowed(TIERS["cpu"], slice="ci", backends="continuous", batch_sizes="4")
    assert {c.id for c in tier.cells()} == {f"cpu-tiny-qwen2-continuous-bs4-p{p}-c{c}" for p in (64, 512) for c in (4, 16)}


def test_an_unknown_slice_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match="unknown slice 'nightly': the tiers define ci"):
        narrowed(TIERS["cpu"], slice="nightly")


def test_a_synthetic_cell_keeps_its_id_and_others_name_their_workload_file_hash_and_load(tmp_path) -> None:
    """A baseline key never changes for a synthetic cell; a changed trace file is a new cell (its hash in the id)."""
    from dataclasses import replace

    from batchperf.suite.matrix import CellParams

    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 4, "output_length": 1}\n')
    base = CellParams("cpu", "cpu", "m", "continuous", "4", "64", "4", "16", 2, 1, "closed")
    assert base.id == "cpu-m-continuous-bs4-p64-c4" and "workload" not in base.resolve().describe()
    traced = replace(base, workload=f"trace:{trace}")
    before = traced.id
    assert before.startswith("cpu-m-continuous-bs4-p64-c4-wtrace-t-") and traced.resolve().describe()["workload"]
    trace.write_text('{"timestamp": 0, "input_length": 5, "output_length": 1}\n')
    assert traced.id != before
    loaded = replace(base, arrival="rate:2", load="1.5")
    assert loaded.id == "cpu-m-continuous-bs4-p64-c4-load1.5" and loaded.resolve().describe()["load"] == 1.5
    with pytest.raises(ValueError, match="invalid load factor '-1'"):
        replace(base, load="-1").resolve()


def test_a_workload_or_load_axis_from_the_command_line_replaces_the_traffic_cells() -> None:
    tier = narrowed(TIERS["cpu"], backends="continuous", workloads="synthetic,prefix:2:16", prompt_lens="64",
                    batch_sizes="4", concurrency="4")
    assert [c.id for c in tier.cells()] == ["cpu-tiny-qwen2-continuous-bs4-p64-c4",
                                            "cpu-tiny-qwen2-continuous-bs4-p64-c4-wprefix2x16"]
