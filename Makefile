# Two entry points for a fresh machine (see README): `make bench` and `make test`.
# Both create .venv with the CPU build of torch first; a bare `torch` would pull a multi-GB CUDA build.
PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.13.0
BIN := $(VENV)/bin

.PHONY: bench test setup clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH)" -e '.[test]'
	touch $@

setup: $(BIN)/.installed

# The main job: every cell of the CPU tier, results JSON under results/.
bench: setup
	$(BIN)/batchperf run --tier cpu

# Unit and plugin tests, then the CPU tier's cells (the suite itself, for real).
test: setup
	$(BIN)/pytest tests
	mkdir -p results
	$(BIN)/pytest perf_tests -m cpu --benchmark-json=results/ci-cpu.json

clean:
	rm -rf $(VENV) results .benchmarks
