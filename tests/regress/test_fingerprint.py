"""Fingerprints: stable keys, what is identity and what is not, diffs that name the field."""

from __future__ import annotations

import sys

import pytest
from gate_samples import CPU_FP, GPU_FP, cell_info

from batchperf.regress import fingerprint as fp
from batchperf.regress.fingerprint import GPU, Fingerprint, HardwareIdentity


def test_key_is_stable_readable_and_covers_identity_only() -> None:
    assert CPU_FP.key == "cpu-test-cpu-9000-2c-" + CPU_FP.key.rsplit("-", 1)[1]
    assert GPU_FP.key.startswith("1x-nvidia-h200-")
    other_versions = Fingerprint(CPU_FP.identity, {"torch": "9.9"}, {"hostname": "elsewhere"})
    assert other_versions.key == CPU_FP.key  # an upgrade still finds its baseline
    assert HardwareIdentity("x86_64", "Test CPU 9000", 4).key != CPU_FP.key
    two = HardwareIdentity("x86_64", "c", 8, (GPU("A100", 81920), GPU("A100", 81920)))
    assert two.key.startswith("2x-a100-") and two.key != HardwareIdentity("x86_64", "c", 8, (GPU("A100", 40960),) * 2).key


def test_round_trip_and_validation() -> None:
    assert Fingerprint.from_dict(GPU_FP.to_dict()) == GPU_FP
    with pytest.raises(ValueError, match="no 'identity'"):
        Fingerprint.from_dict({"key": "x"})
    with pytest.raises(ValueError, match="missing 'cpu_model'"):
        HardwareIdentity.from_dict({"arch": "x86_64", "cpu_cores": 2})
    with pytest.raises(ValueError, match="cpu_cores must be >= 1"):
        HardwareIdentity("x86_64", "c", 0)


def test_current_machine() -> None:
    here = fp.current()
    assert here.identity.cpu_cores >= 1 and here.identity.cpu_model
    assert here.upgrade["python"] and "torch" in here.upgrade
    assert fp.current(cpu_only=True).identity.gpus == ()


def test_cell_identity_and_diffs() -> None:
    info = cell_info()
    ident = fp.cell_identity(info)
    assert "rounds" not in ident and "id" not in ident
    assert ident["config_hash"] == "abcdef0123456789" and ident["parallelism"] == 1
    other = cell_info()
    other.cell["arrival"]["rate"] = 4.0
    assert fp.identity_diff(ident, fp.cell_identity(other)) == ["arrival.rate: None → 4.0"]


def test_dummy_weights_never_match_a_checkpoint_baseline() -> None:
    baseline = cell_info()  # an older baseline: no model.weights, so a checkpoint's
    assert fp.cell_identity(baseline)["weights"] == "checkpoint"
    same = cell_info()
    same.model["weights"] = "checkpoint"  # what this batchperf writes for a checkpoint: still the same cell
    assert fp.identity_diff(fp.cell_identity(baseline), fp.cell_identity(same)) == []
    dummy = cell_info()
    dummy.model["weights"] = "dummy"
    assert fp.identity_diff(fp.cell_identity(baseline), fp.cell_identity(dummy)) == ["weights: checkpoint → dummy"]


def test_versions_and_soft_warnings() -> None:
    assert fp.version_diff({"torch": "2.1", "vllm": "0.8"}, {"torch": "2.2"}) == {
        "torch": ("2.1", "2.2"), "vllm": ("0.8", "-")}
    lines = fp.soft_warnings({"hostname": "a", "gpus": [{"index": 0, "power_limit_w": 700}]},
                             {"hostname": "b", "load_avg_1m": 5.0, "cpu_cores": 2,
                              "gpus": [{"index": 0, "power_limit_w": 500, "other_processes": 2}]})
    assert lines == ["hostname differs: baseline a, now b", "GPU 0: power_limit_w 700 → 500",
                     "GPU 0: 2 other process(es) running on it",
                     "CPU load average 5.0 exceeds the 2 cores this run may use: expect noise"]


def test_an_injected_slowdown_is_recorded_and_warned_about(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BATCHPERF_INJECT_SLOWDOWN", "0.3")
    soft = fp.current().soft
    assert soft["injected"] == {"BATCHPERF_INJECT_SLOWDOWN": "0.3"}
    assert "this run was measured with an injected slowdown: BATCHPERF_INJECT_SLOWDOWN=0.3" in fp.soft_warnings({}, soft)


def test_thread_count_must_match_but_does_not_name_the_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    one = fp.current()
    monkeypatch.delenv("OMP_NUM_THREADS")
    default = fp.current()
    assert one.identity.cpu_threads == 1 and default.identity.cpu_threads == default.identity.cpu_cores
    assert one.key == default.key
    if default.identity.cpu_cores > 1:
        assert fp.identity_diff(one.identity.to_dict(), default.identity.to_dict()) == [
            f"cpu_threads: 1 → {default.identity.cpu_cores}"]


VLLM_ENGINE = {"env": {"VLLM_CPU_OMP_THREADS_BIND": None, "VLLM_CPU_NUM_OF_RESERVED_CPU": None,
                       "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"},
               "args": {"enforce_eager": False, "num_gpu_blocks_override": None, "max_num_batched_tokens": None}}


def test_vllms_settings_must_match_and_a_baseline_without_them_is_not_compared() -> None:
    from batchperf.regress.gate import compare_cell
    from batchperf.regress.verdict import Verdict

    baseline, same, other, older = cell_info(), cell_info(), cell_info(), cell_info()
    for record in (baseline, same, other):
        record.engine = {"env": dict(VLLM_ENGINE["env"]), "args": dict(VLLM_ENGINE["args"])}
    other.engine["env"]["VLLM_CPU_OMP_THREADS_BIND"] = "0-1"
    assert fp.identity_diff(fp.cell_identity(baseline), fp.cell_identity(same)) == []
    assert fp.identity_diff(fp.cell_identity(baseline), fp.cell_identity(other)) == [
        "engine.env.VLLM_CPU_OMP_THREADS_BIND: None → 0-1"]
    assert "engine.env.VLLM_CPU_KVCACHE_SPACE: (absent) → 1" in fp.identity_diff(
        fp.cell_identity(older), fp.cell_identity(baseline))
    # ab compares two environments whose settings may differ on purpose
    assert fp.identity_diff(fp.cell_identity(baseline, engine=False), fp.cell_identity(other, engine=False)) == []
    verdict = compare_cell("c", baseline, other)
    assert verdict.verdict is Verdict.NO_BASELINE
    assert verdict.notes == ("engine.env.VLLM_CPU_OMP_THREADS_BIND: None → 0-1",)
    assert compare_cell("c", older, baseline).verdict is Verdict.NO_BASELINE


def test_the_engine_section_round_trips_and_is_absent_when_empty() -> None:
    from batchperf.results.record import CellRecord

    record = cell_info()
    assert "engine" not in record.to_dict()
    record.engine = VLLM_ENGINE
    assert CellRecord.from_dict(record.to_dict()).engine == VLLM_ENGINE


# py-cpuinfo's dict as pytest-benchmark records it in machine_info.cpu (an excerpt of this fleet's family-25 host)
EPYC_25 = {"vendor_id_raw": "AuthenticAMD", "brand_raw": "AMD EPYC", "family": 25, "model": 17, "stepping": 1,
           "flags": ["avx", "avx2", "avx512_bf16", "avx512bf16", "avx512f", "avx512vnni", "avx512_vnni", "fma",
                     "hypervisor", "rdrand"]}


def test_the_cpu_identity_keeps_vendor_family_model_stepping_and_the_kernel_isa_only() -> None:
    cpu = fp.CPU.from_cpuinfo(EPYC_25)
    assert cpu == fp.CPU("AuthenticAMD", 25, 17, 1, ("avx2", "avx512_bf16", "avx512_vnni", "avx512f"))
    amx = fp.CPU.from_cpuinfo({**EPYC_25, "vendor_id_raw": "GenuineIntel", "flags": ["amx_tile", "amxbf16", "avx2"]})
    assert amx is not None and amx.isa == ("amx_bf16", "amx_tile", "avx2")  # either spelling, the canonical name
    assert fp.CPU.from_cpuinfo({"brand_raw": "AMD EPYC", "flags": ["avx2"]}) is None  # no family: not an identity
    with pytest.raises(ValueError, match="CPU family must be a whole number >= 0"):
        fp.CPU("AuthenticAMD", -1, 17, 1)
    with pytest.raises(ValueError, match="CPU isa names sse2"):
        fp.CPU("AuthenticAMD", 25, 17, 1, ("sse2",))


def test_two_cpus_under_one_name_get_two_keys_and_the_diff_names_the_family() -> None:
    family_25 = HardwareIdentity("x86_64", "AMD EPYC", 2, (), 1, fp.CPU.from_cpuinfo(EPYC_25))
    family_26 = HardwareIdentity("x86_64", "AMD EPYC", 2, (), 1, fp.CPU.from_cpuinfo({**EPYC_25, "family": 26}))
    assert family_25.key.startswith("cpu-amd-epyc-f25m17-2c-") and family_26.key.startswith("cpu-amd-epyc-f26m17-2c-")
    assert fp.identity_diff(family_26.to_dict(), family_25.to_dict()) == ["cpu.family: 26 → 25"]
    assert HardwareIdentity.from_dict(family_25.to_dict()) == family_25
    # an identity recorded before the CPU fields keeps its dict, hence its key: an older baseline is still found
    older = HardwareIdentity("x86_64", "AMD EPYC", 2, (), 1)
    assert "cpu" not in older.to_dict() and older.key == "cpu-amd-epyc-2c-9bb45cf7fc"
    assert older.lacks() == list(fp.CPU_FIELDS) and family_25.lacks() == []


def test_a_gpu_keeps_name_and_memory_and_adds_its_compute_capability() -> None:
    h200 = GPU("NVIDIA H200", 143771, "9.0")
    ident = HardwareIdentity("x86_64", "c", 16, (h200,))
    assert ident.key.startswith("1x-nvidia-h200-sm9-0-") and "compute capability 9.0" in ident.describe()
    assert HardwareIdentity.from_dict(ident.to_dict()) == ident
    assert GPU("NVIDIA H200", 143771).to_dict() == {"name": "NVIDIA H200", "memory_mib": 143771}  # older: unchanged
    assert HardwareIdentity("x86_64", "c", 16, (GPU("NVIDIA H200", 143771),)).lacks()[-1] == "gpus.0.compute_capability"
    with pytest.raises(ValueError, match="compute_capability must be MAJOR.MINOR"):
        GPU("NVIDIA H200", 1, "sm90")


def test_nvml_gives_the_compute_capability(monkeypatch: pytest.MonkeyPatch) -> None:
    from fake_nvml import FakeNvml

    device = {"memory_used": 0, "clock_sm": 1980, "max_clock_sm": 1980, "throttle": 0, "enforced_power_limit_mw": 1}
    fake = FakeNvml([{**device, "name": "NVIDIA H100", "memory_total": 80 * 2**30, "compute_capability": (9, 0)},
                     {**device, "name": "NVIDIA L4", "memory_total": 24 * 2**30}])  # a driver that cannot say: None
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    gpus = fp.current().identity.gpus
    assert [(g.name, g.compute_capability) for g in gpus] == [("NVIDIA H100", "9.0"), ("NVIDIA L4", None)]


def test_an_older_identity_is_completed_from_its_files_machine_info_cpu() -> None:
    older = HardwareIdentity("x86_64", "AMD EPYC", 2, (), 1)
    done = fp.completed(older, {"cpu": EPYC_25})
    assert done.cpu == fp.CPU.from_cpuinfo(EPYC_25) and done.key.startswith("cpu-amd-epyc-f25m17-2c-")
    assert fp.completed(older, {}) == older  # nothing to take it from: it stays older, and says so (lacks)


def test_this_machine_names_its_cpu() -> None:
    here = fp.current(cpu_only=True)
    if not fp.cpu_info():
        pytest.skip("py-cpuinfo cannot read this machine")
    assert here.identity.cpu is not None and here.identity.cpu.vendor
    assert here.identity.cpu == fp.CPU.from_cpuinfo(fp.cpu_info())
    assert fp.current(cpu_only=True, cpu=EPYC_25).identity.cpu == fp.CPU.from_cpuinfo(EPYC_25)


def test_an_older_baseline_is_no_baseline_naming_what_it_lacks_and_the_refresh() -> None:
    from batchperf.regress.gate import compare_cell
    from batchperf.regress.verdict import Verdict

    now = Fingerprint(HardwareIdentity("x86_64", "AMD EPYC", 2, (), 1, fp.CPU.from_cpuinfo(EPYC_25)))
    older = Fingerprint(HardwareIdentity("x86_64", "AMD EPYC", 2, (), 1))
    record = cell_info()
    verdict = compare_cell("c", record, record, baseline_fp=older, current_fp=now)
    assert verdict.verdict is Verdict.NO_BASELINE and not verdict.metrics
    assert verdict.notes == (fp.lacking_note(older.identity, now.identity),)
    assert "lacks cpu.vendor, cpu.family, cpu.model, cpu.stepping, cpu.isa" in verdict.notes[0]
    assert "batchperf refresh --run perf_tests -m cpu" in verdict.notes[0]
    other_family = Fingerprint(HardwareIdentity("x86_64", "AMD EPYC", 2, (), 1,
                                                fp.CPU.from_cpuinfo({**EPYC_25, "family": 26})))
    verdict = compare_cell("c", record, record, baseline_fp=other_family, current_fp=now)
    assert verdict.verdict is Verdict.NO_BASELINE and verdict.notes == ("hardware.cpu.family: 26 → 25",)
    # two older files (neither names the CPU) compare as before
    assert compare_cell("c", record, record, baseline_fp=older, current_fp=older).verdict is Verdict.NO_CHANGE
