# llmnb: `make lab` opens the notebooks, `make test` runs everything CI runs.
# Both set up from nothing: a virtualenv in .venv, llmnb built with mypyc and installed
# (not editable), the real models the notebooks and tests use pulled into the cache.

SHELL  := /bin/bash
.SHELLFLAGS := -o pipefail -c
QUIET  := { grep -v "is ignored" || true; }  # drop pip's notes on absent local indexes

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.llmnb-installed
SOURCES := $(shell find llmnb -name '*.py') pyproject.toml setup.py constraints.txt
MODELS := smollm2-135m qwen2.5-coder-0.5b gemma3-270m
PIP    := $(BIN)/python -m pip --disable-pip-version-check
NBVAL  := --nbval-lax --nbval-current-env --nbval-cell-timeout=600

.PHONY: lab test test-pure test-browser browser setup prepare models vocab lint mypy pytest bench notebooks clean

# JupyterLab refuses to run as root unless told; containers often are root.
ALLOW_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root)

lab: setup models
	$(BIN)/jupyter lab --notebook-dir=notebooks --ServerApp.ip=127.0.0.1 $(ALLOW_ROOT)

test: setup prepare pytest
# in `make test` the browser test ends the first pytest process (``pytest`` below)
test: BROWSER_AFTER = $(BROWSER_TEST) || s=1;

# the rest of `make test`'s set-up (models, vocabulary files, Chromium: downloads and
# unpacking) side by side with its static checks (ruff, mypy: one core each), each target's
# output printed whole when it ends
prepare: setup
	@$(MAKE) --no-print-directory -j5 --output-sync=target models vocab lint mypy browser

setup: $(STAMP)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip 2>&1 | $(QUIET)

# A compiled, non-editable install: what users get and what the tests exercise. pip builds in
# the tree: a build/ left by another set of compiled modules (setup.py) would ship its stale
# extension modules beside the new ones, so it goes first.
$(STAMP): $(BIN)/python $(SOURCES)
	rm -rf build
	$(PIP) install -q -c constraints.txt ".[notebooks,dev]" 2>&1 | $(QUIET)
	$(BIN)/python -I -c "import llmnb.gguf.reader as r, sys; sys.exit(r.__file__.endswith('.py'))" \
		|| (echo "llmnb did not install compiled"; exit 1)
	touch $(STAMP)

models: $(STAMP)
	@for m in $(MODELS); do $(BIN)/llmnb pull $$m > /dev/null || exit 1; done
	@$(BIN)/llmnb models

# llama.cpp's vocabulary test files (models/ggml-vocab-*.gguf with .inp/.out), third-party data
# never committed: pip downloads the llama-cpp-python source package pinned by hash
# (tests/fixtures/llamacpp_vocab/requirements.txt), only those files are unpacked into the
# cache, and the tests read them from there. Done once; a second run finds the stamp.
LLMNB_CACHE := $(or $(LLMNB_HOME),$(HOME)/.cache/llmnb)
VOCAB_REQS  := tests/fixtures/llamacpp_vocab/requirements.txt
VOCAB_DIR   := $(LLMNB_CACHE)/vocab/llama-cpp-python-0.3.36
VOCAB_TAR   := llama_cpp_python-0.3.36

vocab: $(VOCAB_DIR)/.complete

$(VOCAB_DIR)/.complete: $(VOCAB_REQS) | $(BIN)/python
	@rm -rf $(VOCAB_DIR).tmp && mkdir -p $(VOCAB_DIR).tmp
	$(PIP) download -q --no-deps --no-binary :all: --require-hashes -r $(VOCAB_REQS) \
		-d $(VOCAB_DIR).tmp 2>&1 | $(QUIET)
	tar -xzf $(VOCAB_DIR).tmp/$(VOCAB_TAR).tar.gz -C $(VOCAB_DIR).tmp --strip-components=4 \
		--wildcards '$(VOCAB_TAR)/vendor/llama.cpp/models/ggml-vocab-*'
	rm $(VOCAB_DIR).tmp/$(VOCAB_TAR).tar.gz && touch $(VOCAB_DIR).tmp/.complete
	rm -rf $(VOCAB_DIR) && mv $(VOCAB_DIR).tmp $(VOCAB_DIR)
	@ls $(VOCAB_DIR)/*.inp | wc -l | xargs printf "%s llama.cpp vocabulary tests in $(VOCAB_DIR)\n"

# ruff (pinned in constraints.txt; its rules in pyproject.toml) over llmnb, tests and tools.
lint: $(STAMP)
	$(BIN)/ruff check

mypy: $(STAMP)
	$(BIN)/mypy --strict llmnb

# pytest runs from .venv/bin (not `python -m pytest`), so `import llmnb` finds the
# installed compiled package rather than the source tree.
# The tests run as two pytest processes side by side, one per core: no test times anything
# (speed is `llmnb bench`'s), and on a fresh machine more than half their time is numba
# compiling kernels, one core's work each. TESTS_BESIDE holds tests that never take the machine
# lock (llmnb/perf/lock.py), so the lock tests and benches in the other process see no
# stranger; its report follows the first's. Both run with LLMNB_THREADS=1: BLAS, numexpr and
# numba start on one thread (a test still gets the count it asks for, `llmnb.threads(n)`). On
# two threads a kernel waits at every parallel loop for the thread the other process's work
# keeps off its core: SmolLM2-135M decoded at 0.5-3 tokens/s that way beside a busy process,
# at 16-26 with one thread (2-core Zen 1).
# The notebooks run in the same two processes, each starting on its notebooks when its tests
# are done: NOTEBOOKS_BESIDE (each with its solutions) in the second, the rest in the first, and
# in `make test` the browser test last in the first. On an AVX2-only 2-core Zen 1 the notebooks
# took 41 minutes one after the other and about 20 minutes per process side by side; their cells
# mostly run on one thread. The halves are balanced on measured times there: the first process's
# tests take about 620 s, its notebooks 1100 s and the browser test 140 s; the second's tests
# about 620 s, its notebooks 1200 s. Their timings here are slowed by the other
# process, and nothing checks them (--nbval-lax, and no assert reads a time): the saved outputs
# come from `make notebooks`, which runs the notebooks one at a time on a quiet machine. No
# notebook takes the machine lock, so the lock tests still see no stranger.
TESTS_BESIDE := $(addprefix tests/,test_notebook_bite.py test_perplexity.py \
	test_greedy_parity.py test_tiny_models.py test_llamacpp_quantized.py test_speculative.py)
PYTEST_ENV := LLMNB_EXPECT_COMPILED=1 LLMNB_REQUIRE_MODELS=1 LLMNB_THREADS=1
BESIDE_LOG := test-output/pytest-beside.log
BROWSER_TEST = $(PYTEST_ENV) LLMNB_REQUIRE_BROWSER=1 $(BIN)/pytest -q tests/browser
NOTEBOOKS_BESIDE := $(foreach n,03 04 05 06 10 13 14 16 17,\
	$(wildcard notebooks/$(n)_*.ipynb notebooks/solutions/$(n)_*.ipynb))

# The second process runs in the background with its output in BESIDE_LOG, printed after the
# first's report; both must pass.
pytest: $(STAMP)
	@mkdir -p test-output; \
	{ $(PYTEST_ENV) $(BIN)/pytest -q -p no:cacheprovider $(TESTS_BESIDE); \
		s=$$?; $(PYTEST_ENV) $(BIN)/pytest -q -p no:cacheprovider \
		$(NOTEBOOKS_BESIDE) $(NBVAL) || s=1; [ $$s = 0 ]; } > $(BESIDE_LOG) 2>&1 & \
	beside=$$!; trap 'kill $$beside 2> /dev/null' INT TERM; \
	{ $(PYTEST_ENV) $(BIN)/pytest -q tests --ignore=tests/browser \
		$(addprefix --ignore=,$(TESTS_BESIDE)); s=$$?; $(PYTEST_ENV) \
		$(BIN)/pytest -q notebooks $(NBVAL) $(addprefix --ignore=,$(NOTEBOOKS_BESIDE)) || s=1; \
		$(BROWSER_AFTER) [ $$s = 0 ]; }; first=$$?; \
	wait $$beside; second=$$?; \
	echo "--- beside it, $(words $(TESTS_BESIDE)) test files and $(words $(NOTEBOOKS_BESIDE)) notebooks ($(BESIDE_LOG)):"; \
	cat $(BESIDE_LOG); \
	[ $$first = 0 ] && [ $$second = 0 ]

# The notebooks with widgets, run in a real JupyterLab in headless Chromium (`chromium` on PATH;
# Debian: apt-get install chromium). Screenshots of the checked widgets: test-output/browser/.
test-browser: setup models browser
	$(BROWSER_TEST)

# Debian's chromium for the browser test: installed with apt-get when missing (needs root).
browser:
	@command -v chromium > /dev/null || { [ "$$(id -u)" = 0 ] && apt-get update -q \
		&& DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; } \
		|| { echo "make test-browser: needs chromium on PATH (as root: apt-get install chromium)"; exit 1; }

# Editable pure-Python install for development (edits take effect without rebuilding).
test-pure: $(BIN)/python
	LLMNB_PURE_PYTHON=1 $(PIP) install -q -c constraints.txt -e ".[notebooks,dev]" 2>&1 | $(QUIET)
	rm -f $(STAMP)
	$(BIN)/pytest -q tests notebooks $(NBVAL)

bench: setup models
	$(BIN)/llmnb bench all

# Every notebook, each followed by its solutions, executed in place in the compiled build, so
# that the saved outputs all come from one run on one machine. It refuses to start while
# `llmnb bench` or another such run holds the machine (llmnb/perf/lock.py).
notebooks: setup models
	$(BIN)/python tools/run_notebooks.py

clean:
	rm -rf $(VENV) build *.egg-info
