"""Session fixtures of the local integration tier: one model pair, one pair of real vLLM
servers (on free ephemeral ports, so a running ``make local`` is not disturbed) and one
small comparison, shared by every integration test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from experiment import build_config
from experiment.config import Arm, ExperimentConfig
from local_run.arms import arm_servers
from local_run.models import ModelPair, ensure_models
from local_run.servers import LocalServers, free_port, sigterm_raises

# Small scale: enough tokens for several speculative steps per request, quick on 2 cores.
INTEGRATION_MAX_TOKENS = 32
INTEGRATION_REQUESTS_PER_PROMPT = 2  # repeats let the report check the baseline's determinism


@pytest.fixture(scope="session")
def local_config(tmp_path_factory: pytest.TempPathFactory) -> ExperimentConfig:
    baseline_port = free_port()
    speculative_port = free_port()
    while speculative_port == baseline_port:
        speculative_port = free_port()
    return build_config(
        {
            "experiment.local.baseline_port": baseline_port,
            "experiment.local.speculative_port": speculative_port,
            "experiment.local.runs_dir": str(tmp_path_factory.mktemp("runs")),
            "experiment.local.max_tokens": INTEGRATION_MAX_TOKENS,
            "experiment.local.requests_per_prompt": INTEGRATION_REQUESTS_PER_PROMPT,
        }
    )


@pytest.fixture(scope="session")
def model_pair(local_config: ExperimentConfig) -> ModelPair:
    # The default models_dir: the pair `make local` uses, generated once per clone.
    return ensure_models(local_config.local)


@pytest.fixture(scope="session")
def server_logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("server-logs")


@pytest.fixture(scope="session")
def running_servers(
    local_config: ExperimentConfig, model_pair: ModelPair, server_logs: Path
) -> Iterator[dict[Arm, str]]:
    servers = arm_servers(local_config, model_pair.target_dir, model_pair.draft_dir, server_logs)
    with (
        sigterm_raises(),
        LocalServers(servers, local_config.local.startup_timeout_s, print) as running,
    ):
        yield {Arm(s.name): s.url for s in running.servers}
