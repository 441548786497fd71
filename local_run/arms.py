"""The two local arms as servers: rendered by ``runtime/`` from the same config as trn2.

Nothing about a command line is decided here: ``config.local_serving_spec`` makes the
spec of each arm (identical except for the draft settings) and ``runtime.render``
turns it into the vLLM invocation, exactly as the trn2 deployment does for its arms.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from experiment.config import Arm, ExperimentConfig
from local_run.servers import Server, bind_apart
from runtime.render import VllmCommand, render


def local_experiment(config: ExperimentConfig) -> ExperimentConfig:
    """The experiment as the local run measures it: the suite of ``loadtest.prompts.files``
    plus ``local.extra_prompt_files`` (so the lossless check covers 32 prompts locally while
    the trn2 suite stays the published 16). Everything else is the configuration as given."""
    extra = [f for f in config.local.extra_prompt_files if f not in config.loadtest.prompts.files]
    if not extra:
        return config
    prompts = config.loadtest.prompts.model_copy(
        update={"files": [*config.loadtest.prompts.files, *extra]}
    )
    loadtest = config.loadtest.model_copy(update={"prompts": prompts})
    return config.model_copy(update={"loadtest": loadtest})


def arm_commands(
    config: ExperimentConfig, target_dir: Path, draft_dir: Path
) -> dict[Arm, VllmCommand]:
    return {
        arm: render(config.local_serving_spec(arm, str(target_dir), str(draft_dir))) for arm in Arm
    }


def arm_servers(
    config: ExperimentConfig, target_dir: Path, draft_dir: Path, log_dir: Path
) -> list[Server]:
    """Baseline first, then speculative, each logging to ``log_dir/<arm>.log``, each on its
    own cores unless ``local.cpu_binding`` is shared (``LocalConfig.server_binding``)."""
    local = config.local
    servers = []
    for arm, command in arm_commands(config, target_dir, draft_dir).items():
        servers.append(
            Server(
                name=arm.value,
                command=command,
                host=local.host,
                port=local.baseline_port if arm == Arm.BASELINE else local.speculative_port,
                served_model_name=config.serving.target_model,
                log_path=log_dir / f"{arm.value}.log",
                python=sys.executable,
            )
        )
    binding = local.server_binding
    if binding != "shared":
        bind_apart(servers, isolate=binding == "isolated")
    return servers


def write_commands(servers: list[Server], path: Path) -> None:
    """Record the exact invocations of a run, for the report and for reproducing it."""
    path.write_text(
        json.dumps(
            {
                s.name: {
                    "argv": s.command.argv(python=s.python),
                    "env": s.command.env,
                    **({"cores": s.cores} if s.cores is not None else {}),
                }
                for s in servers
            },
            indent=1,
        )
    )
