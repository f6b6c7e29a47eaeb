#!/usr/bin/env bash
# Debian's prometheus (with promtool) and prometheus-pushgateway, for tests/report/test_export_prometheus.py; .ci/run
# calls it. Quiet (apt's output goes to a log, shown only on failure), about 25 MB to download, and it never
# fails the caller: where the binaries cannot be installed (no apt-get, not root and no password-less sudo, no
# network) it says so and exits 0, and that test skips with how to install them.
set -uo pipefail

binaries=(prometheus promtool prometheus-pushgateway)
missing() { for b in "${binaries[@]}"; do command -v "$b" >/dev/null || return 0; done; return 1; }
missing || exit 0

skip() { echo "install_prometheus: $1: tests/report/test_export_prometheus.py will skip (it needs ${binaries[*]})"; exit 0; }
command -v apt-get >/dev/null || skip "no apt-get here"
sudo=()
if [[ "$(id -u)" != 0 ]]; then
    command -v sudo >/dev/null && sudo -n true 2>/dev/null || skip "not root and no password-less sudo"
    sudo=(sudo -n)
fi

log="$(mktemp)"
cleanup=("$log")
# A machine with systemd or sysvinit would start both packages' services (Prometheus scraping every 15 s beside
# the benchmark cells): a policy-rc.d that forbids starting any, for the install only, as Docker images have.
policy="${POLICY_RC_D:-/usr/sbin/policy-rc.d}"  # another path only for its test
if [[ ! -e "$policy" ]]; then
    printf '#!/bin/sh\nexit 101\n' | "${sudo[@]}" tee "$policy" >/dev/null && "${sudo[@]}" chmod 755 "$policy" \
        && cleanup+=("$policy")
fi
trap '"${sudo[@]}" rm -f "${cleanup[@]}"' EXIT

install() {
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        prometheus prometheus-pushgateway >>"$log" 2>&1
}
# Package lists already there: no `apt-get update` (the slow part). Missing or stale: update, then again.
if ! install; then
    "${sudo[@]}" apt-get update -qq >>"$log" 2>&1 && install || {
        tail -20 "$log"
        skip "WARNING: apt-get could not install prometheus and prometheus-pushgateway (apt's log above)"
    }
fi
missing && skip "WARNING: installed, yet not all of ${binaries[*]} are on PATH"
echo "install_prometheus: installed $(prometheus --version 2>&1 | head -1)"
