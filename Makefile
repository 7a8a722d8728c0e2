# Every target sets itself up: the first one run on a fresh machine creates .venv.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
TORCH_VERSION := 2.13.0
# The Triton that CPU tests interpret (the dev extra asks for one on x86_64 Linux): the release
# torch 2.14.1 pins, which lies on this project's machines' disks; the newest is a 285 MB
# download that a dropped connection once cut short in CI.
TRITON_VERSION := 3.8.0
# The Ultralytics parity tests run in their own venv: PyPI's torchvision (which ultralytics needs)
# does not import beside the CPU torch 2.13.0 above; torch 2.14.1 with torchvision 0.29.1 does.
UL_VENV := .venv-ul
UL_PY := $(UL_VENV)/bin/python
UL_STAMP := $(UL_VENV)/.installed
UL_TORCH := torch==2.14.1 torchvision==0.29.1

.PHONY: setup setup-ultralytics test test-fast test-ultralytics test-cuda lint check gate demo bench docs serve clean

# pip's output (its WARNING lines about the index configuration included) goes to this log; a
# failed step says which one and prints the log's last lines and its path.
SETUP_LOG := $(VENV)/setup.log
logged = >>$(SETUP_LOG) 2>&1 || { echo "setup failed while $(1); the last lines of $(SETUP_LOG):" >&2; \
	tail -n 15 $(SETUP_LOG) >&2; exit 1; }

setup: $(STAMP)

# CPU torch first, where none is present: a plain `torch` requirement would pull a CUDA build.
$(STAMP): pyproject.toml
	@echo "Setting up $(VENV) (the first time takes a few minutes; pip's log: $(SETUP_LOG))"
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@: > $(SETUP_LOG)
	@$(PY) -m pip install -q --upgrade pip $(call logged,upgrading pip)
	@$(PY) -c "import torch" 2>/dev/null || \
		$(PY) -m pip install -q torch==$(TORCH_VERSION) $(call logged,installing torch)
	@if [ "$$(uname -s)-$$(uname -m)" = Linux-x86_64 ] && ! $(PY) -c "import triton" 2>/dev/null; then \
		$(PY) -m pip install -q triton==$(TRITON_VERSION) $(call logged,installing triton); fi
	@$(PY) -m pip install -q -e ".[optim,docs,dev]" $(call logged,installing the project with its optim/docs/dev extras)
	@touch $(STAMP)

# One pytest-xdist worker per core, each with its share of torch's threads (tests/conftest.py).
# The main and fast lanes send each file to one worker (a module's fixtures are built once); the
# Ultralytics lane, 3 files with session fixtures only, balances test by test.
XDIST := -n auto
XDIST_FILES := $(XDIST) --dist loadfile

test: $(STAMP)
	$(PY) -m pytest -q $(XDIST_FILES) --ignore=tests/ultralytics
	$(MAKE) test-ultralytics

# The fast lane while you work: everything but the tests marked slow (multi-process worlds,
# torch.compile, the benchmark harness end to end, the site in a browser, git hooks, megabyte
# timing) and the CUDA ones. `make test` (README, CI) still runs everything.
test-fast: $(STAMP)
	$(PY) -m pytest -q $(XDIST_FILES) -m "not slow and not cuda" --ignore=tests/ultralytics

$(UL_STAMP): pyproject.toml
	test -x $(UL_PY) || $(PYTHON) -m venv $(UL_VENV)
	$(UL_PY) -m pip install -q $(UL_TORCH)
	# cloudpickle: Ultralytics' multi-GPU launch file needs it (installed by Ultralytics on first
	# DDP use; tests/ultralytics checks what that file carries).
	$(UL_PY) -m pip install -q "ultralytics>=8.4" cloudpickle pytest pytest-xdist
	touch $(UL_STAMP)

# The Ultralytics venv alone: CI builds it beside .venv (both mostly wait on the network).
setup-ultralytics: $(UL_STAMP)

# Skips (saying so) only where ultralytics cannot be installed, and never in CI (CI=true).
test-ultralytics:
	@if $(MAKE) $(UL_STAMP); then PYTHONPATH=src $(UL_PY) -m pytest -q $(XDIST) tests/ultralytics; \
	elif [ "$${CI:-}" = true ]; then echo "ultralytics could not be installed (CI)"; exit 1; \
	else echo "SKIPPED tests/ultralytics: ultralytics could not be installed here"; fi

test-cuda: $(STAMP)
	$(PY) -m pytest -q -m cuda tests/cuda

# The optimizer side of tests/ (a second run: see [tool.mypy]), strict but for calls into
# torch's untyped functions (Tensor.backward, torch.multiprocessing.spawn, TorchDispatchMode).
# src was checked strictly by the first run, so its modules are followed silently here.
MYPY_TESTS = --follow-imports=silent --untyped-calls-exclude=torch

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests scripts
	$(VENV)/bin/ruff format --check src tests scripts
	$(VENV)/bin/mypy
	$(VENV)/bin/mypy $(MYPY_TESTS) tests/musgd tests/cuda tests/scripts tests/ultralytics

# The governance linters on this repository: trailers of the governed history, provenance, work
# packages, evidence claims and the changelog's promises.
check: $(STAMP)
	$(VENV)/bin/wpgate check

gate: lint test docs check

# The documentation site (mkdocs-material and the wpgate plugin); --strict turns every warning,
# a broken link or an unrenderable evidence block included, into a failure.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

serve: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs serve

# The demo's evidence and its chart, in gitignored out/ (the site's demo page draws the
# committed run, docs/evidence/musgd-demo.json): the demo changes no tracked file.
DEMO_EVIDENCE := out/musgd-demo.json
DEMO_PNG := out/demo.png

demo:
	@echo "make demo: sets up $(VENV) where needed, trains the nano detector once per MuSGD"
	@echo "variant (under a minute on an idle 2-core CPU), draws $(DEMO_PNG), builds the site."
	@$(MAKE) --no-print-directory $(STAMP)
	@$(PY) -m musgd.bench demo --png $(DEMO_PNG) --out $(DEMO_EVIDENCE)
	@echo "Building the site (a few seconds)"
	@NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet
	@echo "Site built in $(CURDIR)/site/ (the demo: site/demo/) - browse it with: make serve, then open http://127.0.0.1:8000/"

bench: $(STAMP)
	$(PY) scripts/bench_musgd.py

clean:
	rm -rf $(VENV) $(UL_VENV) build dist site .pytest_cache .mypy_cache .ruff_cache
