# tunekit — the two commands of the README:
#   make demo   create .venv, install tunekit (pinned), run the CPU quickstart
#   make test   install the test extras too and run the whole suite
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip --disable-pip-version-check
TEST_EXTRAS := dev,api,webui,metrics,deepspeed,quant,trackers,optimizers,vision,gguf,ray
# the gguf extra's llama-cpp-python is built from source: llama.cpp's CPU backend only, without its tools, tests and
# llava (tunekit loads, quantizes and verifies GGUF files with it; docs/after-training.md). GGML_NATIVE=OFF: a portable
# AVX2-level build (the -march=native one died of SIGILL in llama.cpp's q8_0 path on the AMX / AVX-512 test host)
export CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_BLAS=OFF -DGGML_CUDA=OFF -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
	-DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF
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
