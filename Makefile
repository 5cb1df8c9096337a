# The lab's commands. `make help` lists them. Every target sets the environment up first:
# it uses the virtualenv or conda env that is active, else creates .venv here.
.DEFAULT_GOAL := help
SHELL := /bin/bash

PYTHON ?= python3
ifdef VIRTUAL_ENV
  ENV_PYTHON := $(VIRTUAL_ENV)/bin/python
else ifdef CONDA_PREFIX
  ENV_PYTHON := $(CONDA_PREFIX)/bin/python
else
  ENV_PYTHON := .venv/bin/python
endif
# One install stamp per environment, redone when pyproject.toml changes.
STAMP := .make/installed-$(shell echo "$(abspath $(ENV_PYTHON))" | cksum | cut -d' ' -f1)
ARGS ?=
# Test processes for `make test`: pytest-xdist workers, each module's tests on one of them (a
# module's shared launch runs once), the notebooks spread over both, heaviest first
# (tests/scheduling.py). 1 runs the suite serially.
TEST_WORKERS ?= 2
ifeq ($(TEST_WORKERS),1)
  PARALLEL :=
else
  PARALLEL := -n $(TEST_WORKERS) --dist loadgroup
endif

.PHONY: help setup system-deps run smoke test test-fast test-speed lint lab doctor bench clean

help: ## list every target
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-11s %s\n", $$1, $$2}'
	@echo "  (ARGS=\"...\" passes extra options, e.g. make run ARGS=\"--only 01\")"

.venv/bin/python:
	$(PYTHON) -m venv .venv

$(STAMP): pyproject.toml | $(ENV_PYTHON)
	$(ENV_PYTHON) -m pip install --upgrade pip
	$(ENV_PYTHON) -m pip install -e '.[dev]'
	@mkdir -p .make && touch $@

setup: $(STAMP) ## create/refresh the environment and install the pinned dependencies
	@$(ENV_PYTHON) -m labkit doctor --programs

system-deps: $(STAMP) ## install the optional system programs (apt-get as root; else prints how)
	$(ENV_PYTHON) -m labkit doctor --install $(ARGS)

run: $(STAMP) ## execute the whole course headless (papermill), results in runs/latest
	$(ENV_PYTHON) -m labkit course run $(ARGS)

smoke: $(STAMP) ## execute the whole course at smoke size
	$(ENV_PYTHON) -m labkit course run --smoke $(ARGS)

test: $(STAMP) ## run the test suite (includes every notebook at smoke size); the 15 slowest last
	$(ENV_PYTHON) -m pytest $(PARALLEL) --durations=15 $(ARGS)

test-fast: $(STAMP) ## the edit-test loop: no notebooks, browser, real jobs or clusters (minutes)
	$(ENV_PYTHON) -m pytest -m "not notebook and not browser and not slow" $(ARGS)

test-speed: $(STAMP) ## the speed tier: pace x0.1 and x10, then the smoke course on one busy core
	$(ENV_PYTHON) -m labkit course speed $(ARGS)

lint: $(STAMP) ## ruff over labkit, tests and notebooks
	$(ENV_PYTHON) -m ruff check labkit tests notebooks

# The lab's kernelspec (labkit/course/jupyter) comes first: its kernels load labkit at start, so
# %%torchrun is there after a kernel restart too.
lab: $(STAMP) ## open JupyterLab on the notebooks (kernels start with labkit loaded)
	JUPYTER_PATH="$(CURDIR)/labkit/course/jupyter$${JUPYTER_PATH:+:$$JUPYTER_PATH}" \
		$(ENV_PYTHON) -m jupyter lab --notebook-dir=notebooks $(ARGS)

doctor: $(STAMP) ## what this machine has: torch, GPUs, NCCL, Redis, NATS, optional programs
	$(ENV_PYTHON) -m labkit doctor $(ARGS)

bench: $(STAMP) ## launch overhead: labkit vs bare torchrun, JSON
	$(ENV_PYTHON) -m labkit bench launch --json $(ARGS)

clean: ## remove the environment stamp and caches (keeps runs/ and .venv)
	rm -rf .make .pytest_cache .ruff_cache
