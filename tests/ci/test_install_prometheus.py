"""ci/install_prometheus.sh (what .ci/run calls): quiet, never fails CI, and starts no service. Run on a PATH of
stand-ins (apt-get, sudo, id) so that nothing is installed and no real system file is touched."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from paths import REPO

SCRIPT = REPO / "ci" / "install_prometheus.sh"
TOOLS = ("bash", "env", "mktemp", "tail", "head", "rm", "tee", "chmod", "cat", "true", "touch")
pytestmark = pytest.mark.skipif(any(shutil.which(t) is None for t in TOOLS), reason="needs a POSIX userland")

# apt-get's stand-in: logs its arguments and whether a policy-rc.d forbids starting services; `install` fails
# until `update` ran (no package lists on a clean machine), then puts the three binaries on PATH.
FAKE_APT = """#!/bin/bash
echo "$* policy=$(cat "$POLICY_RC_D" 2>/dev/null | tail -1)" >>"$CALLS"
[[ -n "${APT_FAILS:-}" ]] && { echo "E: Unable to locate package prometheus"; exit 100; }
case "$1" in
    update) touch "$BIN/.lists" ;;
    install) [[ -e "$BIN/.lists" ]] || { echo "E: Unable to locate package prometheus"; exit 100; }
             for b in prometheus promtool prometheus-pushgateway; do
                 printf '#!/bin/bash\\necho "%s, version 2.42.0"\\n' "$b" >"$BIN/$b"; chmod +x "$BIN/$b"; done ;;
esac
"""


def stub(bin_dir: Path, name: str, body: str) -> None:
    (bin_dir / name).write_text(body)
    (bin_dir / name).chmod(0o755)


def run(tmp_path: Path, *, apt: bool = True, uid: int = 0, sudo: bool = False,
        present: bool = False, lists: bool = False, **env: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in TOOLS:
        (bin_dir / tool).symlink_to(shutil.which(tool))
    stub(bin_dir, "id", f"#!/bin/bash\necho {uid}\n")
    if sudo:  # password-less: runs the command as given
        stub(bin_dir, "sudo", '#!/bin/bash\n[[ "$1" == -n ]] && shift\nexec "$@"\n')
    if apt:
        stub(bin_dir, "apt-get", FAKE_APT)
    if present:
        for b in ("prometheus", "promtool", "prometheus-pushgateway"):
            stub(bin_dir, b, "#!/bin/bash\n")
    if lists:  # apt's package lists are there already
        (bin_dir / ".lists").touch()
    calls = tmp_path / "calls"
    done = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=60, env={
        "PATH": str(bin_dir), "BIN": str(bin_dir), "CALLS": str(calls), "POLICY_RC_D": str(tmp_path / "policy-rc.d"),
        "HOME": str(tmp_path), **env})
    return done, calls.read_text().splitlines() if calls.exists() else []


def test_a_clean_machine_gets_them_quietly_without_starting_services(tmp_path: Path) -> None:
    done, calls = run(tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "install_prometheus: installed prometheus, version 2.42.0\n" and done.stderr == ""
    install = "install -y -qq --no-install-recommends prometheus prometheus-pushgateway policy=exit 101"
    assert calls == [install, "update -qq policy=exit 101", install]  # lists fetched only when missing
    assert not (tmp_path / "policy-rc.d").exists()  # the install-time policy is gone again


def test_with_package_lists_there_is_no_update_and_sudo_serves_a_user(tmp_path: Path) -> None:
    done, calls = run(tmp_path, uid=1000, sudo=True, lists=True)
    assert done.returncode == 0 and done.stdout.startswith("install_prometheus: installed"), done.stdout
    assert [c.split()[0] for c in calls] == ["install"]


def test_an_existing_policy_is_left_alone(tmp_path: Path) -> None:
    policy = tmp_path / "policy-rc.d"
    policy.write_text("#!/bin/sh\nexit 0\n")  # someone's own policy: allows services
    done, calls = run(tmp_path)
    assert done.returncode == 0 and calls[0].endswith("policy=exit 0")
    assert policy.read_text() == "#!/bin/sh\nexit 0\n"


def test_already_installed_is_a_no_op(tmp_path: Path) -> None:
    done, calls = run(tmp_path, present=True)
    assert (done.returncode, done.stdout, done.stderr, calls) == (0, "", "", [])


@pytest.mark.parametrize(("options", "why"), [
    ({"apt": False}, "no apt-get here"),
    ({"uid": 1000}, "not root and no password-less sudo"),
    ({"APT_FAILS": "1"}, "WARNING: apt-get could not install prometheus and prometheus-pushgateway"),
])
def test_where_it_cannot_install_it_says_why_and_ci_goes_on(tmp_path: Path, options: dict, why: str) -> None:
    done, calls = run(tmp_path, **options)
    assert done.returncode == 0, done.stderr
    assert f"install_prometheus: {why}" in done.stdout and "tests/report/test_export_prometheus.py will skip" in done.stdout
    if "APT_FAILS" in options:
        assert "E: Unable to locate package prometheus" in done.stdout  # apt's own words, from its log
    else:
        assert calls == []
    assert not (tmp_path / "policy-rc.d").exists()


def test_ci_run_calls_it_before_the_tests() -> None:
    text = (SCRIPT.parents[1] / ".ci" / "run").read_text()
    assert text.index("bash ci/install_prometheus.sh") < text.index("make test")
    assert os.access(SCRIPT, os.X_OK)
