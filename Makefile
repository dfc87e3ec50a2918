# The two commands: `make run` (or `make demo`) and `make test`; `make test-all` adds the slow proofs. Each creates
# the virtual environment and installs everything on first use; nothing is downloaded at run time after that.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: setup run demo test test-all lint bench image clean distclean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev,local]'
	@rm -f $(VENV)/.installed-*
	@touch $(STAMP)

setup: $(STAMP)

# Where the local stack keeps its state, its ports, and how many worker replicas it runs:
# `make run DATA=/tmp/mine PORT_BASE=9000 WORKERS=3`.
STACK_OPTIONS = $(if $(DATA),--data $(DATA)) $(if $(PORT_BASE),--port-base $(PORT_BASE)) $(if $(WORKERS),--workers $(WORKERS))

## Start the whole stack on loopback, launch the demo helpers, keep running until Ctrl-C. Data is kept across
## restarts (`make clean` starts over).
run: setup
	$(BIN)/python -m tools.demo run $(STACK_OPTIONS)

## The same scenario, then stop everything; exit 0 only if every helper reached its expected outcome.
demo: setup
	$(BIN)/python -m tools.demo demo $(STACK_OPTIONS)

# Parallel test workers for `make test`. Most of the suite waits on real time (dev servers, timers, subprocesses),
# not on the CPU, so four workers keep two cores busy; each worker starts its own servers.
# `make test TEST_WORKERS=1` runs them one after another.
TEST_WORKERS ?= 4

## Lint, type-check and run the tests: unit, workflows on the time-skipping server, the store on SQLite and
## PostgreSQL, the end-to-end paths on the dev server (under 10 minutes on 2 cores).
test: setup lint
	$(BIN)/python -m pytest -q -m "not slow" $(if $(filter-out 1,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist worksteal)

## Lint, type-check and run every test: `make test`'s, then the slow proofs one after another (the chaos soaks,
## the crash races, 2,500 admissions through one owner, each bench's smoke run), which load the machine on their
## own. CI runs this.
test-all: setup lint
	$(BIN)/python -m pytest -q -m "not slow" $(if $(filter-out 1,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist worksteal)
	$(BIN)/python -m pytest -q -m slow

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy .

## Every bench, then each figure beside its baseline and the ratio (about an hour, the capacity bench half of it; `make bench QUICK=1`: about 25 minutes).
bench: setup
	$(BIN)/python -m tools.bench $(if $(QUICK),--quick)

## Forget the local stack's state (rows, histories, codec key, logs); the virtual environment stays.
clean:
	rm -rf data .pytest_cache .mypy_cache .ruff_cache

## Also remove the virtual environment and the TypeScript client's packages and build.
distclean: clean
	rm -rf $(VENV) client-typescript/node_modules client-typescript/dist client-typescript/src/generated

## Build the container image helper-runtime:<version> from deploy/Dockerfile with docker or podman, on
## python:3.11-slim or, where no registry answers, on Debian bookworm made with debootstrap (`make image BASE=debian`).
image:
	$(PYTHON) -m tools.image.build $(if $(BASE),--base $(BASE))
