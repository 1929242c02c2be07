# Two commands matter:  `make demo` (the main job) and `make test` (the whole suite).
# Both create the environments they need and install what they need first.
#
# Environments (each from its requirements file, on top of requirements-tools.txt):
#   .venv         torch 2.13.0, the pinned development and CI engine (requirements-dev.txt)
#   .venv-floor   torch 2.9.0 + torch_xla 2.9.0, the oldest supported torch (requirements-floor.txt)
#   .venv-newest  torch 2.14.1, the newest torch this machine installs (requirements-newest.txt)
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
FAST := -m "not slow"
# The tests run in two pytest-xdist workers, a test file per worker at a time (module
# fixtures run once), the longest files first (tests/conftest.py): about 30 % less wall
# time than one at a time on a 2-core machine (docs/architecture.md says how tests keep
# their clusters apart). `make test XDIST=` runs them one at a time.
XDIST ?= -n 2 --dist loadfile --no-loadscope-reorder

.PHONY: demo test test-pinned test-floor test-newest test-fast lint bench clean

$(STAMP): pyproject.toml requirements-dev.txt requirements-tools.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements-dev.txt
	$(PY) -m pip install -q --no-deps -e .
	touch $(STAMP)

# The floor downloads several GB (torch 2.9.0 with its CUDA libraries, torch_xla) from the
# package index. pip's own HTTP cache keeps nothing when the index answers without cache
# headers, so the wheels go to a wheelhouse that `pip download` fills only with what it
# lacks; the venv installs from it. A second install on one machine downloads nothing.
WHEELS ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/distrib/wheels

.venv-floor/.installed: requirements-floor.txt requirements-tools.txt pyproject.toml
	$(PYTHON) -m venv .venv-floor
	.venv-floor/bin/python -m pip install -q --upgrade pip
	.venv-floor/bin/python -m pip download -q -d $(WHEELS) -r requirements-floor.txt
	.venv-floor/bin/python -m pip install -q --no-index --find-links $(WHEELS) \
		-r requirements-floor.txt
	.venv-floor/bin/python -m pip install -q --no-deps -e .
	touch $@

.venv-newest/.installed: requirements-newest.txt requirements-tools.txt pyproject.toml
	$(PYTHON) -m venv .venv-newest
	.venv-newest/bin/python -m pip install -q --upgrade pip
	.venv-newest/bin/python -m pip install -q -r requirements-newest.txt
	.venv-newest/bin/python -m pip install -q --no-deps -e .
	touch $@

demo: $(STAMP)
	$(PY) examples/demo_fit.py

lint: $(STAMP)
	$(PY) -m ruff check src tests bench examples
	$(PY) -m mypy
	$(VENV)/bin/lint-imports

# The whole suite on the pinned torch, then the fast suite on the floor and newest torch.
test: test-pinned test-floor test-newest

test-pinned: lint
	$(PY) -m pytest -q $(XDIST)

test-floor: .venv-floor/.installed
	.venv-floor/bin/python -m pytest -q $(XDIST) $(FAST)

test-newest: .venv-newest/.installed
	.venv-newest/bin/python -m pytest -q $(XDIST) $(FAST)

# Quick local runs: lint and the fast suite on the pinned torch only.
test-fast: lint
	$(PY) -m pytest -q $(XDIST) $(FAST)

bench: $(STAMP)
	$(PY) bench/run_all.py

clean:
	rm -rf $(VENV) .venv-floor .venv-newest .mypy_cache .ruff_cache .pytest_cache
