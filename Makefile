# normlab: `make train` sets up and runs the default job; `make test` sets up and runs the tests.
VENV ?= .venv
PY := $(VENV)/bin/python
PYTHON ?= python3

.PHONY: setup train test test-all lint format clean

setup: $(VENV)/.installed

# torch 2.13.0 (CPU build) first, so the project's `torch>=2.4` range installs nothing more.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[dev,bench,sweep,ray]"
	# muP's reference for the tests: its core needs torch and pyyaml alone; its declared
	# requirements (torchvision, seaborn) would replace the CPU torch with a CUDA build
	$(PY) -m pip install -q --no-deps mup==1.0.0
	# hyper-connections' reference (tests/models/test_connections.py); its einops comes with
	# x-transformers (dev)
	$(PY) -m pip install -q --no-deps hyper-connections==0.4.11
	touch $@

train: setup
	WANDB_MODE=$${WANDB_MODE:-offline} $(PY) train.py $(ARGS)

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

test: lint
	WANDB_MODE=offline $(PY) -m pytest -q -m "not slow" --durations=15 $(ARGS)

test-all: lint
	WANDB_MODE=offline $(PY) -m pytest -q $(ARGS)

format: setup
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

clean:
	rm -rf outputs multirun wandb .pytest_cache
