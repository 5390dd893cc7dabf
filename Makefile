VENV ?= .venv
PY := $(VENV)/bin/python
# two installs: the runtime package alone (make demo) and with the dev and bench extras (tests, lint, bench)
RUNTIME_STAMP := $(VENV)/.installed-runtime
STAMP := $(VENV)/.installed

.PHONY: venv runtime demo test test-deps bench lint clean

venv: $(STAMP)

runtime: $(RUNTIME_STAMP)

$(RUNTIME_STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e .
	touch $(RUNTIME_STAMP)

$(STAMP): $(RUNTIME_STAMP)
	$(PY) -m pip install -q -e '.[dev,bench]'
	touch $(STAMP)

demo: runtime
	$(VENV)/bin/settlekit demo

# the suite in TEST_PROCESSES processes (pytest-xdist; 0 runs it in this one), each test file whole in one of them
# (tests/conftest.py groups the files that share PostgreSQL's transaction horizon)
TEST_PROCESSES ?= 2

test: venv test-deps
	$(PY) -m pytest -n $(TEST_PROCESSES) --dist loadgroup

# programs the tests start themselves (pgbouncer, chromium); installed only where that needs no password prompt
test-deps:
	@.ci/install-pgbouncer
	@.ci/install-chromium

bench: venv
	$(PY) bench/run_all.py

lint: venv
	$(VENV)/bin/ruff check src tests bench examples
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-cache

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info
