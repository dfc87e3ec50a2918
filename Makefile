# The two commands: `make run` (or `make demo`) and `make test`. Both create the virtual
# environment and install everything on first use; nothing is downloaded at run time after that.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: setup run demo test test-fast lint bench clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev,local]'
	@rm -f $(VENV)/.installed-*
	@touch $(STAMP)

setup: $(STAMP)

## Start the whole stack on loopback, launch the demo helpers, keep running until Ctrl-C.
run: setup
	$(BIN)/python -m demo run

## The same scenario, then stop everything; exit 0 only if every helper reached its expected outcome.
demo: setup
	$(BIN)/python -m demo demo

## Lint, type-check and run every test (unit, time-skipping, store on SQLite and PostgreSQL, end-to-end).
test: setup lint
	$(BIN)/python -m pytest -q

test-fast: setup
	$(BIN)/python -m pytest -q -m "not e2e"

lint: setup
	$(BIN)/ruff check .
	$(BIN)/mypy .

bench: setup
	$(BIN)/python -m bench.observation_latency
	$(BIN)/python -m bench.handoff

clean:
	rm -rf $(VENV) data .pytest_cache .mypy_cache .ruff_cache
