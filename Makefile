# Two commands set everything up on a fresh machine that has python3 and make:
#   make demo   -> creates .venv if missing, installs eigenflow, runs the main job on an embedded default
#   make test   -> same set-up, then the default test suite
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

# Local, self-contained runtime state (Prefect's ephemeral server DB). Compiled numba code is cached in the user
# cache directory (~/.cache/eigenflow, or $$EIGENFLOW_CACHE_DIR), filled once after installing by `eigenflow warm`.
export PREFECT_HOME ?= $(CURDIR)/.eigenflow-home/prefect
export PREFECT_SERVER_ANALYTICS_ENABLED ?= false
export PREFECT_SERVER_UI_ENABLED ?= false
export PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS ?= 90
export DASK_LOGGING__DISTRIBUTED ?= warning
export AWS_EC2_METADATA_DISABLED ?= true

.PHONY: demo test test-slow bench install clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --upgrade pip
	$(BIN)/python -m pip install -e '.[test]'
	$(BIN)/eigenflow warm
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
