# Two commands on a fresh machine with Python 3.11: `make demo` and `make test`.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test test-fast lint notebook clean

$(BIN)/llama-index-recency: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# The package alone needs no torch (e5 is numpy); the tests also load MiniLM and Qwen3's
	# code, so torch goes first and exactly: the CPU build, never a CUDA one via a dependency.
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e ".[test]"
	touch $@

demo: $(BIN)/llama-index-recency  ## the bundled 16 memories and 10 questions, embedded Qdrant, offline
	HF_HUB_OFFLINE=1 $(BIN)/llama-index-recency demo

test: $(BIN)/llama-index-recency  ## the test suite, on both cores
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -n 2

test-fast: $(BIN)/llama-index-recency  ## the quick loop: every test not marked slow, stop at the first failure
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -x -m "not slow"

notebook: $(BIN)/llama-index-recency  ## re-execute the experiments notebook in place, saving its outputs
	HF_HUB_OFFLINE=1 MPLBACKEND=Agg $(BIN)/python notebooks/execute.py

lint: $(BIN)/llama-index-recency  ## ruff, mypy and the layers contract, pinned in the test extras
	$(BIN)/ruff check llama_index_recency tests benchmarks
	$(BIN)/mypy
	$(BIN)/lint-imports

clean:
	rm -rf $(VENV) .pytest_cache
