# Every target sets itself up: the first one run on a fresh machine creates .venv.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
TORCH_VERSION := 2.13.0

.PHONY: setup test test-cuda lint gate demo bench docs serve clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# CPU torch first, where none is present: a plain `torch` requirement would pull a CUDA build.
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q torch==$(TORCH_VERSION)
	$(PY) -m pip install -q -e ".[optim,docs,dev]"
	touch $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q

test-cuda: $(STAMP)
	$(PY) -m pytest -q -m cuda tests

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests scripts
	$(VENV)/bin/ruff format --check src tests scripts
	$(VENV)/bin/mypy --strict src

gate: lint test

demo: $(STAMP)
	$(PY) -m musgd.bench demo

bench: $(STAMP)
	$(PY) scripts/bench_musgd.py

clean:
	rm -rf $(VENV) build dist site .pytest_cache .mypy_cache .ruff_cache
