"""A baseline pinned under the key an identity had before it named the CPU: found, named, never compared."""

from __future__ import annotations

from pathlib import Path

from gate_samples import cell_info, results_file

from batchperf.regress.fingerprint import CPU, Fingerprint, HardwareIdentity
from batchperf.regress.store import BASELINE_FILE, older_pin

NOW = Fingerprint(HardwareIdentity("x86_64", "AMD EPYC", 2, (), 1, CPU("AuthenticAMD", 25, 17, 1, ("avx2",))))
OLDER = Fingerprint(HardwareIdentity("x86_64", "AMD EPYC", 2, (), 1))


def test_an_older_pin_of_this_machine_is_named_with_what_it_lacks_and_the_refresh(tmp_path: Path) -> None:
    assert older_pin(tmp_path, NOW) is None  # nothing pinned at all
    folder = tmp_path / OLDER.key
    folder.mkdir()
    results_file(folder / BASELINE_FILE, [cell_info()], fp=OLDER)
    note = older_pin(tmp_path, NOW)
    assert note is not None and str(folder / BASELINE_FILE) in note
    assert "lacks cpu.vendor, cpu.family, cpu.model, cpu.stepping, cpu.isa" in note and "batchperf refresh" in note
    assert older_pin(tmp_path, OLDER) is None  # an identity that is itself older has no older key
