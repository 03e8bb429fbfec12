# nmtkit developer Makefile. Every target sets itself up: `make test` on a fresh clone works.
PYTHON ?= python3
VENV   ?= .venv
TORCH  ?= torch==2.13.0
# SYSTEM_TORCH=1 (test-gpu, gpu-report): run on $(PYTHON)'s own torch (a GPU node's CUDA build);
# nmtkit's other dependencies and pytest come from $(WHEELHOUSE) into $(DEPS), without the package
# index, and torch is never installed (tools/system_deps.py). See benchmarks/GPU.md.
SYSTEM_TORCH ?=
WHEELHOUSE   ?= dist/wheelhouse
DEPS         ?= .system-torch-deps

ifeq ($(SYSTEM_TORCH),1)
STAMP  := $(DEPS)/.nmtkit-installed
# the source tree first, then the installed dependencies, then whatever PYTHONPATH held
PY     := PYTHONPATH="$(CURDIR):$(abspath $(DEPS))$${PYTHONPATH:+:$$PYTHONPATH}" $(PYTHON)
else
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.nmtkit-installed
PY     := $(BIN)/python
endif
BIN    ?= $(VENV)/bin
# QUICK=1: `make bench` runs every benchmark in its quick mode.
QUICK  ?=
# DATA: the corpora folder for slow tests/benchmarks (default ../shared/data); for `make demo`,
# a folder with {train,valid,test}.{en,fr} to use instead of the message catalogs.
DATA   ?=

.PHONY: install test test-slow test-browser test-gpu gpu-report demo bench wheelhouse lint docs clean

install: $(STAMP)

ifeq ($(SYSTEM_TORCH),1)
$(STAMP): setup.py
	$(PYTHON) tools/system_deps.py --wheelhouse $(WHEELHOUSE) --dest $(DEPS)
	touch $(STAMP)
else
# torch first, pinned (an unpinned torch would pull the multi-GB CUDA build), then the package.
$(STAMP): setup.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q "$(TORCH)"
	$(BIN)/python -m pip install -q -e ".[dev]"
	touch $(STAMP)
endif

# the quick suite (a few minutes on two cores), in one pytest process a core (pytest-xdist; each
# test runs on one thread), TEST_WORKERS at most; test-slow: the tests marked `slow`, the long runs
# on real data (DATA) and the ones that compile with torch.compile. .ci/run runs both.
TEST_WORKERS ?= 4
test: $(STAMP)
	$(BIN)/python -m pytest -q -n auto --maxprocesses $(TEST_WORKERS) -m "not slow" tests

test-slow: $(STAMP)
	$(if $(DATA),DATA="$(DATA)") $(BIN)/python -m pytest -q -m slow tests

# the nmtkit serve page in headless chromium (Debian's package; installing it needs root)
test-browser: $(STAMP)
	@command -v chromium >/dev/null || { apt-get update && apt-get install -y chromium; } || \
	  { echo "make test-browser: install Debian's chromium (apt-get install chromium) and rerun"; exit 1; }
	$(BIN)/python -m pytest -q -m browser tests

# the tests marked `cuda` (they skip, with the reason, where CUDA is unavailable)
test-gpu: $(STAMP)
	$(PY) -m pytest -q -rs -m cuda tests

# everything a first GPU run needs to know, in one process tree (benchmarks/gpu_report.py): on a
# GPU node `make gpu-report OUT=DIR PYTHON=python3 SYSTEM_TORCH=1` (benchmarks/GPU.md); without
# CUDA it runs what it can and says so. QUICK=1: tiny sizes, a few steps;
# BUDGET=seconds (480); SECTIONS=a comma list of train,translate,profile,run,tests.
gpu-report: $(STAMP)
	@test -n "$(OUT)" || { echo "usage: make gpu-report OUT=DIR [PYTHON=python3 SYSTEM_TORCH=1] [QUICK=1]" >&2; exit 2; }
	DATA="$(DATA)" $(PY) benchmarks/gpu_report.py --out "$(OUT)" $(if $(QUICK),--quick) $(if $(BUDGET),--budget $(BUDGET)) $(if $(SECTIONS),--sections $(SECTIONS))

demo: $(STAMP)
	PATH="$(abspath $(BIN)):$$PATH" DATA="$(DATA)" bash examples/demo/run.sh

bench: $(STAMP)
	@for b in benchmarks/*.py; do case $$b in */naive_*|*/gpu_report.py) continue;; esac; echo "== $$b"; DATA="$(DATA)" NMTKIT_BENCH_QUICK="$(QUICK)" QUICK="$(QUICK)" $(BIN)/python $$b || exit 1; done

# nmtkit and its runtime dependencies except torch, as wheels, for nodes without internet
wheelhouse: $(STAMP)
	$(BIN)/python tools/wheelhouse.py --out dist/wheelhouse

# docs/options.md from the commands' own options (tests/test_docs.py checks it is current)
docs: $(STAMP)
	$(BIN)/python tools/options_doc.py

lint: $(STAMP)
	$(BIN)/ruff check nmtkit tests benchmarks tools devtools

clean:
	rm -rf $(VENV) $(DEPS) build dist *.egg-info .pytest_cache
