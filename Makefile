# The two commands: `make run` (or `make demo`) and `make test`. Both create the virtual
# environment and install everything on first use; nothing is downloaded at run time after that.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: setup run demo test test-fast lint bench clean distclean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev,local]'
	@rm -f $(VENV)/.installed-*
	@touch $(STAMP)

setup: $(STAMP)

# Where the local stack keeps its state, and its ports: `make run DATA=/tmp/mine PORT_BASE=9000`.
STACK_OPTIONS = $(if $(DATA),--data $(DATA)) $(if $(PORT_BASE),--port-base $(PORT_BASE))

## Start the whole stack on loopback, launch the demo helpers, keep running until Ctrl-C. Data is kept across
## restarts (`make clean` starts over).
run: setup
	$(BIN)/python -m demo run $(STACK_OPTIONS)

## The same scenario, then stop everything; exit 0 only if every helper reached its expected outcome.
demo: setup
	$(BIN)/python -m demo demo $(STACK_OPTIONS)

## Lint, type-check and run every test (unit, time-skipping, store on SQLite and PostgreSQL, end-to-end).
test: setup lint
	$(BIN)/python -m pytest -q

test-fast: setup
	$(BIN)/python -m pytest -q -m "not e2e"

lint: setup
	$(BIN)/ruff check .
	$(BIN)/mypy .

## Every bench, then each figure beside its baseline and the ratio (about 20 minutes; `make bench QUICK=1`: a few).
bench: setup
	$(BIN)/python -m bench $(if $(QUICK),--quick)

## Forget the local stack's state (rows, histories, codec key, logs); the virtual environment stays.
clean:
	rm -rf data .pytest_cache .mypy_cache .ruff_cache

## Also remove the virtual environment.
distclean: clean
	rm -rf $(VENV)
