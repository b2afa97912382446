# Two commands do all the set-up on a fresh machine: `make train` and `make test`.
# Each creates .venv and installs the package (with torch pinned to the CPU build) when missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=
# make test runs the suite on every core (pytest-xdist); TEST_WORKERS=0 runs it in one process
TEST_WORKERS ?= auto

.PHONY: install train test test-slow lint bench clean

$(STAMP): setup.py setup.cfg pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip setuptools wheel
	$(BIN)/python -m pip install -q -c constraints.txt -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

train: $(STAMP)
	$(BIN)/unity-sb3 train

test: $(STAMP)
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist worksteal $(PYTEST_ARGS)

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

bench: $(STAMP)
	$(BIN)/python benchmarks/scenes.py
	$(BIN)/python benchmarks/wrapper_overhead.py

clean:
	rm -rf $(VENV) build *.egg-info results
