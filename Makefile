# Two commands matter:  `make demo` (the main job) and `make test` (the whole suite).
# Both create the environments they need and install what they need first.
#
# Environments (each from its requirements file, on top of requirements-tools.txt):
#   .venv         torch 2.13.0, the pinned development and CI engine (requirements-dev.txt)
#   .venv-floor   torch 2.9.0 + torch_xla 2.9.0, the oldest supported torch (requirements-floor.txt)
#   .venv-newest  torch 2.14.1, the newest torch this machine installs (requirements-newest.txt)
#   .venv-py3.10, .venv-py3.12, .venv-py3.13, .venv-system
#                 the pinned torch on each other interpreter the README promises (pyenv's
#                 3.10/3.12/3.13, Debian's own /usr/bin/python3), from requirements-dev.txt
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

.PHONY: demo test test-pinned test-floor test-newest test-fast test-interpreters \
	test-cross-interpreter lint docs bench clean

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

# The other interpreters: pyenv's (PYENV_ROOT or ~/.pyenv) or python3.X on the PATH, and
# Debian's own python3. Each gets the pinned torch; their wheels go through the wheelhouse.
PYENV_VERSIONS ?= $(or $(PYENV_ROOT),$(HOME)/.pyenv)/versions
find_python = $(firstword $(wildcard $(PYENV_VERSIONS)/$(1).*/bin/python$(1)) \
	$(shell command -v python$(1) 2>/dev/null))
PYTHON3.10 ?= $(call find_python,3.10)
PYTHON3.12 ?= $(call find_python,3.12)
PYTHON3.13 ?= $(call find_python,3.13)
PYTHON_SYSTEM ?= $(wildcard /usr/bin/python3)
INTERPRETERS := py3.10 py3.12 py3.13 system
interpreter = $(if $(filter system,$(1)),$(PYTHON_SYSTEM),$(PYTHON$(patsubst py%,%,$(1))))

.venv-%/.installed: requirements-dev.txt requirements-tools.txt pyproject.toml
	@test -n "$(call interpreter,$*)" || { echo "no interpreter for .venv-$* on this machine" \
		"(set PYTHON3.X or PYTHON_SYSTEM)"; exit 1; }
	$(call interpreter,$*) -m venv .venv-$*
	.venv-$*/bin/python -m pip install -q --upgrade pip
	.venv-$*/bin/python -m pip download -q -d $(WHEELS) -r requirements-dev.txt
	.venv-$*/bin/python -m pip install -q --no-index --find-links $(WHEELS) -r requirements-dev.txt
	.venv-$*/bin/python -m pip install -q --no-deps -e .
	touch $@

demo: $(STAMP)
	$(PY) examples/demo_fit.py

lint: $(STAMP)
	$(PY) -m ruff check src tests bench examples
	$(PY) -m mypy
	$(VENV)/bin/lint-imports
	$(MAKE) --no-print-directory docs

# The API reference, from the docstrings (pdoc), in build/api/; any warning fails it. Names
# that distrib imports on first use (ParameterServerStrategy's gRPC, ...) are looked up first
# so that the reference documents them.
define PDOC_SCRIPT
import importlib, pathlib, sys, warnings
import pdoc, pdoc.render
for name in ("distrib", "distrib.experimental", "distrib.models", "distrib.utils",
             "distrib.strategies"):
    module = importlib.import_module(name)
    for attr in module.__all__:
        getattr(module, attr)
pdoc.render.configure(docformat="restructuredtext")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    pdoc.pdoc("distrib", output_directory=pathlib.Path(sys.argv[1]))
bad = [str(w.message) for w in caught]
print("\n".join(bad) or f"API reference written to {sys.argv[1]}", file=sys.stderr)
sys.exit(1 if bad else 0)
endef
export PDOC_SCRIPT

docs: $(STAMP)
	rm -rf build/api
	$(PY) -c "$$PDOC_SCRIPT" build/api

# The whole suite on the pinned torch, the fast suite on the floor and newest torch and on
# every other interpreter, then checkpoints written by each interpreter restored by every other.
test: test-pinned test-floor test-newest test-interpreters test-cross-interpreter

test-pinned: lint
	$(PY) -m pytest -q $(XDIST)

test-floor: .venv-floor/.installed
	.venv-floor/bin/python -m pytest -q $(XDIST) $(FAST)

test-newest: .venv-newest/.installed
	.venv-newest/bin/python -m pytest -q $(XDIST) $(FAST)

test-interpreters: $(foreach i,$(INTERPRETERS),.venv-$(i)/.installed)
	failed=""; for i in $(INTERPRETERS); do echo "== fast suite on .venv-$$i"; \
		.venv-$$i/bin/python -m pytest -q $(XDIST) $(FAST) || failed="$$failed $$i"; done; \
		test -z "$$failed" || { echo "== the fast suite failed on:$$failed"; exit 1; }

# tests/checkpoint/test_cross_interpreter.py requires every environment it is given.
test-cross-interpreter: $(STAMP) .venv-floor/.installed .venv-newest/.installed \
		$(foreach i,$(INTERPRETERS),.venv-$(i)/.installed)
	DISTRIB_TEST_INTERPRETERS="$(abspath $(PY)) $(foreach v,.venv-floor .venv-newest \
		$(foreach i,$(INTERPRETERS),.venv-$(i)),$(abspath $(v))/bin/python)" \
		$(PY) -m pytest -q tests/checkpoint/test_cross_interpreter.py

# Quick local runs: lint and the fast suite on the pinned torch only.
test-fast: lint
	$(PY) -m pytest -q $(XDIST) $(FAST)

bench: $(STAMP)
	$(PY) bench/run_all.py

clean:
	rm -rf $(VENV) .venv-floor .venv-newest $(foreach i,$(INTERPRETERS),.venv-$(i)) .mypy_cache .ruff_cache .pytest_cache
