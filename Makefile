# Two commands set everything up on a fresh machine that has python3 and make:
#   make demo   -> creates .venv if missing, installs eigenflow, runs the main job on an embedded default
#   make test   -> same set-up, then the default test suite
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

# Local, self-contained runtime state (Prefect's ephemeral server DB, numba cache).
export PREFECT_HOME ?= $(CURDIR)/.eigenflow-home/prefect
export PREFECT_SERVER_ANALYTICS_ENABLED ?= false
export PREFECT_SERVER_UI_ENABLED ?= false
export PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS ?= 90
export NUMBA_CACHE_DIR ?= $(CURDIR)/.eigenflow-home/numba
export DASK_LOGGING__DISTRIBUTED ?= warning
export AWS_EC2_METADATA_DISABLED ?= true

.PHONY: demo test test-slow bench install clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --upgrade pip
	$(BIN)/python -m pip install -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/eigenflow demo

test: $(STAMP)
	$(BIN)/python -m pytest -q

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow

bench: $(STAMP)
	$(BIN)/python -m pip install -e '.[test,bench]'
	$(BIN)/python benchmarks/bench_embed.py

clean:
	rm -rf $(VENV) .eigenflow-home demo-output *.egg-info
