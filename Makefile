# Two commands do all the set-up on a fresh machine (see README.md):
#   make run    # installs into .venv, then: bayesflow run workflows/cold_posterior.yaml
#   make test   # installs into .venv (with test tools), then runs the test suite
# and a third is the fast lane while working:
#   make test-fast   # unit tests and one tiny end-to-end run, in parallel (under 3 minutes)
# and a fourth checks that float comparisons hold on CPUs of other kinds:
#   make test-kernels   # the float tests under each CPU kernel level and 1 and 2 threads
# Both are fast when .venv is already set up: the install step is skipped unless
# pyproject.toml changed.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
SPEC   ?= workflows/cold_posterior.yaml
ARGS   ?=
# torch: CPU-only machines get the CPU build of torch 2.13.0 (the release this project is
# tested with; pip finds it through the machine's own configuration); machines with an NVIDIA
# driver get pip's default build. No package index is named here: a user who wants another
# one sets pip's own environment variables (PIP_INDEX_URL, PIP_EXTRA_INDEX_URL).
TORCH_CPU ?= torch==2.13.0

.PHONY: run test test-fast test-kernels setup setup-dev bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.torch: | $(BIN)/python
	@if command -v nvidia-smi >/dev/null 2>&1; then \
	  echo "NVIDIA driver found: installing torch with CUDA"; $(BIN)/pip install -q 'torch>=2.3'; \
	else \
	  echo "no GPU: installing $(TORCH_CPU)"; $(BIN)/pip install -q '$(TORCH_CPU)'; \
	fi
	@touch $@

$(VENV)/.installed: pyproject.toml $(VENV)/.torch
	$(BIN)/pip install -q -e .
	@touch $@

# laplace-torch, the tests' reference for Laplace, and its curvature back-ends are installed
# without their declared dependencies: they require torchvision, which they import only in
# their examples, and pip would replace the CPU build of torch by a CUDA build to satisfy it.
# Their other requirements are in the dev extra.
LAPLACE_REF ?= laplace-torch==0.3 backpack-for-pytorch==1.7.1 asdfghjkl==0.1a4 curvlinops-for-pytorch==3.0.1
$(VENV)/.installed-dev: pyproject.toml $(VENV)/.installed
	$(BIN)/pip install -q -e '.[dev,bench,nuts,ray,llm,lmeval]'
	$(BIN)/pip install -q --no-deps $(LAPLACE_REF)
	@touch $@

setup: $(VENV)/.installed
setup-dev: $(VENV)/.installed-dev

run: setup
	$(BIN)/bayesflow run $(SPEC) $(ARGS)

test: setup-dev
	$(BIN)/python -m pytest -q -n 2 --dist loadgroup $(ARGS)

# Unit tests (no `e2e` or `slow` mark) plus the `smoke` end-to-end run: the real command
# line, MLflow store and Jupyter kernel on a tiny spec.
test-fast: setup-dev
	$(BIN)/python -m pytest -q -n 2 --dist loadgroup -m "(not e2e and not slow) or smoke" $(ARGS)

# The tests that compare floats, under every CPU kernel level torch offers on this machine
# (ATEN_CPU_CAPABILITY=default, avx2, avx512 where the CPU has them) and with 1 and 2 torch
# threads (BAYESFLOW_TEST_THREADS, read by tests/conftest.py): what CI machines of other
# kinds would see. `make test-kernels KERNEL_TESTS=tests` runs the whole suite so.
# docs/portability.md records the combinations run and their results.
KERNEL_TESTS ?= tests/engines tests/evaluate tests/dag tests/stages tests/models \
	tests/test_shared_curvature.py tests/test_parity.py tests/test_posterior_product.py
test-kernels: setup-dev
	@native=$$($(BIN)/python -c "import torch; print(torch.backends.cpu.get_cpu_capability())"); \
	case "$$native" in AVX512) levels="default avx2 avx512";; AVX2) levels="default avx2";; *) levels="default";; esac; \
	echo "torch's own choice on this CPU: $$native; running under: $$levels"; failed=""; \
	for level in $$levels; do for threads in 1 2; do \
	  echo "== ATEN_CPU_CAPABILITY=$$level BAYESFLOW_TEST_THREADS=$$threads"; \
	  ATEN_CPU_CAPABILITY=$$level BAYESFLOW_TEST_THREADS=$$threads \
	    $(BIN)/python -m pytest -q -n 2 $(KERNEL_TESTS) $(ARGS) || failed="$$failed $$level/$$threads"; \
	done; done; \
	if [ -n "$$failed" ]; then echo "failed under:$$failed"; exit 1; fi; echo "passed under every combination"

bench: setup-dev
	$(BIN)/python -m benchmarks.speed.run $(ARGS)

clean:
	rm -rf $(VENV) .bayesflow reports mlruns mlartifacts mlflow.db
