#!/usr/bin/env bash
# Is VENV still the environment `make setup` stamped? Its python runs and imports batchperf, and it was built
# from LOCK (the sha256 the lock module's `mark` wrote under VENV). Exit 0 when so; else 1, saying why on stderr,
# so that the Makefile rebuilds instead of trusting a stamp whose environment is gone, broken or of another lock.
#     bash ci/venv_ok.sh VENV [LOCK]
set -u
venv=${1:?usage: venv_ok.sh VENV [LOCK]}
lock=${2:-requirements.lock}
marker="$venv/batchperf-lock.sha256"  # the lock module's MARKER

stale() { echo "setup: $venv $1: building it again" >&2; exit 1; }

[[ -e "$venv/bin/.installed" ]] || exit 1  # never set up: make builds it anyway, nothing to explain
[[ -x "$venv/bin/python" ]] || stale "has no runnable bin/python"
"$venv/bin/python" -c "import batchperf" >/dev/null 2>&1 || stale "cannot import batchperf with its bin/python"
[[ -r "$marker" ]] || stale "records no lock (no $(basename "$marker"))"
want=$(sha256sum "$lock" | cut -d' ' -f1)
[[ "$(tr -d '[:space:]' <"$marker")" == "$want" ]] || stale "was built from another $lock"
exit 0
