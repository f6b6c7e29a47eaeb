#!/usr/bin/env bash
# The nightly performance job; the GitHub workflow (ci/workflows/nightly.yml) calls it, and it runs by hand too.
#
#   ci/nightly.sh --tier gpu --out nightly/                 # the whole matrix on this machine
#   ci/nightly.sh --tier gpu --shard 2/4 --out shard2/      # one shard (then --merge in a final job)
#   ci/nightly.sh --tier gpu --merge shard*/results.json --out nightly/
#   ci/nightly.sh --tier gpu --gpus 4 --out nightly/          # 4 pytest processes, one pinned to each GPU, merged
#   ci/nightly.sh --tier cpu --out /tmp/n -- --batchperf-batch-sizes=2   # CPU tier, narrowed (pytest args after --)
#
# Options: --history DIR (default: $BATCHPERF_HISTORY or history/), --python PY (use this interpreter as is;
# default: create/refresh .venv with the test and history extras, plus vLLM and NVML for --tier gpu),
# --baselines DIR (default: baselines/), --gpus G|all (one pytest process per GPU, CUDA_VISIBLE_DEVICES=i; with
# --shard I/N the runner's shard is split again into G, so N runners x G GPUs each hold a distinct subset).
#
# Writes into --out: gpu-health.json, results.json, junit.xml, pytest.log, report/, comparison.md, history.md,
# and appends results.json to the history folder. The comparison (and history) go to $GITHUB_STEP_SUMMARY when set.
# With BATCHPERF_PUSHGATEWAY=URL set, the run is also pushed to that Prometheus Pushgateway (results.om beside it).
# Exit status: pytest's (non-zero when a cell failed, e.g. a regression confirmed by its re-measure), or in --merge
# mode non-zero when a merged cell carries a confirmed regression; non-zero too when a push fails.
set -euo pipefail
cd "$(dirname "$0")/.."

tier=gpu shard="" gpus=1 out="" python="${BATCHPERF_PYTHON:-}" history="${BATCHPERF_HISTORY:-history}" baselines=baselines
merge=() pytest_extra=()
usage() { sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-2}"; }
while (($#)); do
    case "$1" in
        --tier) tier="$2"; shift 2 ;;
        --shard) shard="$2"; shift 2 ;;
        --gpus) gpus="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        --history) history="$2"; shift 2 ;;
        --python) python="$2"; shift 2 ;;
        --baselines) baselines="$2"; shift 2 ;;
        --merge) shift; while (($#)) && [[ "$1" != --* ]]; do merge+=("$1"); shift; done ;;
        --) shift; pytest_extra=("$@"); break ;;
        -h|--help) usage 0 ;;
        *) echo "ci/nightly.sh: unknown argument '$1'" >&2; usage ;;
    esac
done
[[ "$tier" == cpu || "$tier" == gpu ]] || { echo "ci/nightly.sh: --tier must be cpu or gpu, not '$tier'" >&2; exit 2; }
[[ -n "$out" ]] || out="nightly/$tier-$(date -u +%Y%m%dT%H%M%SZ)"
[[ -z "$shard" || ${#merge[@]} -eq 0 ]] || { echo "ci/nightly.sh: --shard and --merge exclude each other" >&2; exit 2; }
mkdir -p "$out"
out="$(cd "$out" && pwd)"
export PYTHONUNBUFFERED=1
# this checkout's batchperf, also when --python names an interpreter with another install
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"

step() { echo; echo "=== nightly: $*"; }

# --- environment ---------------------------------------------------------------------------------------------
if [[ -z "$python" ]]; then
    step "environment (.venv)"
    extras="test,history"
    # the merge job runs no cell: it needs no vLLM
    [[ "$tier" == gpu && ${#merge[@]} -eq 0 ]] && extras="$extras,gpu,vllm-cuda"
    [[ -x .venv/bin/python ]] || python3 -m venv .venv
    .venv/bin/python -m pip install -q --upgrade pip
    # the CPU tier gets the CPU build of torch (see Makefile); the GPU tier takes the torch vLLM pins
    [[ "$tier" == cpu ]] && .venv/bin/python -m pip install -q "${TORCH:-torch==2.13.0}"
    .venv/bin/python -m pip install -q -e ".[$extras]"
    python=.venv/bin/python
fi
bp() { "$python" -m batchperf.cli "$@"; }
summary() { if [[ -n "${GITHUB_STEP_SUMMARY:-}" ]]; then cat "$@" >>"$GITHUB_STEP_SUMMARY"; fi; }

status=0
results="$out/results.json"
if [[ "$gpus" == all ]]; then
    gpus="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)"
    ((gpus >= 1)) || { echo "ci/nightly.sh: --gpus all, but nvidia-smi lists no GPU" >&2; exit 2; }
fi
[[ "$gpus" =~ ^[1-9][0-9]*$ ]] || { echo "ci/nightly.sh: --gpus must be a whole number >= 1 or 'all', not '$gpus'" >&2; exit 2; }
if ((gpus > 1 && ${#merge[@]} == 0)); then
    # One pytest process per GPU, each pinned to its device, so no two cells ever share a GPU. Runner shard I/N
    # becomes global shards (I-1)*G+1 .. I*G of N*G: the same cell always lands in the same place.
    IFS=/ read -r index count <<<"${shard:-1/1}"
    step "$gpus pytest processes, one per GPU"
    pids=()
    for ((g = 0; g < gpus; g++)); do
        CUDA_VISIBLE_DEVICES=$g "$0" --tier "$tier" --python "$python" --baselines "$baselines" \
            --shard "$(((index - 1) * gpus + g + 1))/$((count * gpus))" --out "$out/gpu$g" -- "${pytest_extra[@]}" \
            >"$out/gpu$g.log" 2>&1 &
        pids+=($!)
    done
    for pid in "${pids[@]}"; do wait "$pid" || status=1; done
    merge=("$out"/gpu*/results.json)
    [[ -e "${merge[0]}" ]] || { echo "ci/nightly.sh: no GPU process wrote results (see $out/gpu*.log)" >&2; exit 1; }
fi
if ((${#merge[@]})); then
    step "merge ${#merge[@]} shard(s)"
    bp merge "${merge[@]}" --out "$results"
    if [[ -n "$shard" ]]; then  # this runner's GPUs are merged; report, comparison and history come in the merge job
        exit "$status"
    fi
else
    # --- GPU health (soft facts, warnings only) --------------------------------------------------------------
    step "GPU health"
    bp gpu-health --out "$out/gpu-health.json"

    # --- the cells --------------------------------------------------------------------------------------------
    step "pytest perf_tests -m $tier${shard:+ (shard $shard)}"
    args=(perf_tests -m "$tier" -p no:cacheprovider --benchmark-compare "--benchmark-json=$results"
          "--junitxml=$out/junit.xml" -o junit_suite_name="batchperf-$tier")
    [[ -d "$baselines" ]] && args+=("--batchperf-baselines=$baselines")
    [[ -n "$shard" ]] && args+=("--batchperf-shard=$shard")
    set +e
    "$python" -m pytest "${args[@]}" "${pytest_extra[@]}" 2>&1 | tee "$out/pytest.log"
    status=${PIPESTATUS[0]}
    set -e
    echo "pytest exit status: $status"
    if [[ -n "$shard" ]]; then
        echo "shard $shard done: report, comparison and history come from the merge job (ci/nightly.sh --merge)"
        exit "$status"
    fi
fi
[[ -f "$results" ]] || { echo "ci/nightly.sh: no results at $results (see $out/pytest.log)" >&2; exit "$((status ? status : 1))"; }

# --- report --------------------------------------------------------------------------------------------------
step "report"
bp report "$results" --out "$out/report" || status=$((status ? status : 1))

# --- comparison with this machine's baseline, as the job summary ----------------------------------------------
step "comparison"
baseline="$("$python" -m batchperf.regress.nightly baseline-path "$results" "$baselines")"
if [[ -f "$baseline" ]]; then
    bp compare "$baseline" "$results" --markdown "$out/comparison.md" || true
else
    printf '## batchperf: no baseline\n\nNo pinned baseline for this machine at `%s`; pin a reviewed run with `batchperf refresh`.\n' \
        "$baseline" >"$out/comparison.md"
fi
cat "$out/comparison.md"
summary "$out/comparison.md"

# --- history ---------------------------------------------------------------------------------------------------
step "history ($history)"
entry="$("$python" -m batchperf.regress.nightly history-name "$results" "$tier")"
mkdir -p "$history"
cp "$results" "$history/$entry"
echo "appended $history/$entry"
bp history "$history" --markdown | tee "$out/history.md"
summary "$out/history.md"

# --- Prometheus: the run (and the history's change points) to a Pushgateway, when one is configured ------------
if [[ -n "${BATCHPERF_PUSHGATEWAY:-}" ]]; then
    step "push to the Pushgateway at $BATCHPERF_PUSHGATEWAY"
    # grouped by job and fingerprint: each machine replaces only its own previous night (docs/prometheus.md)
    bp export "$results" --out "$out/results.om" --push "$BATCHPERF_PUSHGATEWAY" --history "$history" \
        || { echo "nightly: the push failed (above); the results are in $out" >&2; status=$((status ? status : 1)); }
fi

# --- verdict ---------------------------------------------------------------------------------------------------
if ((${#merge[@]})); then
    "$python" -m batchperf.regress.nightly confirmed-regressions "$results" || status=1
fi
echo
echo "nightly: artifacts in $out (exit $status)"
exit "$status"
