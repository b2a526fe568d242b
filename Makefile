# tunekit — the two commands of the README:
#   make demo   create .venv, install tunekit (pinned), run the CPU quickstart
#   make test   install the test extras too and run the whole suite
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip --disable-pip-version-check
TEST_EXTRAS := dev,api,webui,metrics,deepspeed,quant,trackers,optimizers,vision
PYTEST_ARGS ?=
# tests run in 2 processes (pytest-xdist; each test is one-threaded, see tests/conftest.py); TEST_WORKERS=0 runs them in one
TEST_WORKERS ?= 2

.PHONY: install install-test demo test bench clean-venv

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

# torch first, alone and pinned: everything after it must reuse this build (CPU here, CUDA on a GPU box).
$(VENV)/.base: $(BIN)/python pyproject.toml constraints.txt
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -c constraints.txt -e .
	@touch $@

$(VENV)/.test: $(VENV)/.base
	$(PIP) install -q -c constraints.txt -e ".[$(TEST_EXTRAS)]"
	@touch $@

install: $(VENV)/.base
install-test: $(VENV)/.test

demo: install
	$(BIN)/python examples/quickstart.py

# lint first: the formatter and the linter (pyproject.toml [tool.ruff]) over everything CI ships
LINT_PATHS := src tests benchmarks examples scripts

test: install-test
	$(BIN)/ruff format --check $(LINT_PATHS)
	$(BIN)/ruff check $(LINT_PATHS)
	bash scripts/test-system-deps.sh
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist worksteal $(PYTEST_ARGS)

bench: install-test
	$(BIN)/python benchmarks/run_all.py

clean-venv:
	rm -rf $(VENV)
