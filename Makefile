# Two commands do all the set-up on a fresh machine (see README.md):
#   make run    # installs into .venv, then: bayesflow run workflows/cold_posterior.yaml
#   make test   # installs into .venv (with test tools), then runs the test suite
# Both are fast when .venv is already set up: the install step is skipped unless
# pyproject.toml changed.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
SPEC   ?= workflows/cold_posterior.yaml
ARGS   ?=
# torch: CPU-only machines get a CPU build (pinned to 2.13.0, the release whose CPU wheel
# this project is tested with); machines with an NVIDIA driver get pip's default build.
TORCH_CPU ?= torch==2.13.0
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu

.PHONY: run test setup setup-dev bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.torch: | $(BIN)/python
	@if command -v nvidia-smi >/dev/null 2>&1; then \
	  echo "NVIDIA driver found: installing torch with CUDA"; $(BIN)/pip install -q 'torch>=2.3'; \
	elif $(BIN)/pip download -q --no-deps -d $(VENV)/.wheels '$(TORCH_CPU)' --no-index >/dev/null 2>&1 \
	     || ls /opt/wheels/torch-*cpu* >/dev/null 2>&1; then \
	  echo "no GPU: installing the CPU build of $(TORCH_CPU)"; $(BIN)/pip install -q '$(TORCH_CPU)'; \
	else \
	  echo "no GPU: installing the CPU build of $(TORCH_CPU) from the PyTorch CPU index"; \
	  $(BIN)/pip install -q '$(TORCH_CPU)' --index-url $(TORCH_CPU_INDEX) --extra-index-url https://pypi.org/simple; \
	fi
	@touch $@

$(VENV)/.installed: pyproject.toml $(VENV)/.torch
	$(BIN)/pip install -q -e .
	@touch $@

$(VENV)/.installed-dev: pyproject.toml $(VENV)/.installed
	$(BIN)/pip install -q -e '.[dev,bench,nuts,ray]'
	@touch $@

setup: $(VENV)/.installed
setup-dev: $(VENV)/.installed-dev

run: setup
	$(BIN)/bayesflow run $(SPEC) $(ARGS)

test: setup-dev
	$(BIN)/python -m pytest -q $(ARGS)

bench: setup-dev
	$(BIN)/python -m benchmarks.run $(ARGS)

clean:
	rm -rf $(VENV) .bayesflow reports mlruns mlartifacts mlflow.db
