# Two commands set up a fresh machine:  `make demo`  and  `make test`.
# Both create .venv/ and install everything they need on first use (and again when pyproject.toml changes).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install demo test lint bench clean

$(STAMP): pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[test]"
	@touch $(STAMP)

install: $(STAMP)

## Generate data, train on a local TF cluster, register, serve, send traffic, detect drift.
## The log goes to var/demo/demo.log; `make demo DEMO_ARGS=--verbose` shows it too.
demo: $(STAMP)
	$(BIN)/driftwarden demo $(DEMO_ARGS)

## The whole test suite (SQLite and the PostgreSQL at 127.0.0.1:5432, real TF cluster processes, real uvicorn),
## on two pytest-xdist workers, a test module on one worker (--dist loadfile: its module fixtures start once),
## the long modules first (tests/conftest.py: LONG_MODULES; --no-loadscope-reorder keeps that order).
## `make test TEST_WORKERS=0` runs it in one process.
TEST_WORKERS ?= 2
# More pytest options, e.g. `make test PYTEST_ARGS="--durations=30"` or `PYTEST_ARGS="-x tests/monitors"`.
PYTEST_ARGS ?=
# The project's packages, byte-compiled before the tests: the suite's processes (CLI runs, servers, cluster nodes)
# then import them without compiling their source, also where PYTHONDONTWRITEBYTECODE keeps Python from caching.
PACKAGES := driftwarden core access registry predictions monitors training alerts service migrations

test: $(STAMP)
	bash scripts/system-deps.sh
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	bash scripts/audit.sh
	$(BIN)/python -m compileall -q -j 0 $(PACKAGES)
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports

bench: $(STAMP)
	$(BIN)/python bench/predict_latency.py

clean:
	rm -rf var .pytest_cache .mypy_cache .ruff_cache
