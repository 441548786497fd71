"""What makes compiled Neuron artifacts belong to a spec, and the marker that says so.

The precompile Job writes the marker last, so its presence means the upload finished;
its fingerprint covers every rendered setting that changes the compiled graph (model,
draft, k, lengths, batch, block size, TP, LNC, Neuron overrides) and none that do not
(host, port, served name). ``serve`` refuses artifacts whose fingerprint differs, instead
of letting vLLM silently recompile for hours. Standard library only.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from runtime.render import PER_REQUEST_SPEC_METRICS_FLAG, VllmCommand, render
from runtime.spec import ServingSpec

MARKER_NAME = ".precompiled.json"
# Flags (each with its value) that do not reach the compiler: where the server listens, the
# name it answers to, and what its responses report.
NOT_COMPILED_FLAGS = ("--host", "--port", "--served-model-name", PER_REQUEST_SPEC_METRICS_FLAG)
# Environment that does not reach the compiler (where artifacts live is not what they are).
NOT_COMPILED_ENV = ("NEURON_COMPILED_ARTIFACTS",)


def compile_fingerprint(spec: ServingSpec) -> str:
    command: VllmCommand = render(spec)
    args = list(command.args)
    for flag in NOT_COMPILED_FLAGS:
        if flag in args:
            index = args.index(flag)
            del args[index : index + 2]
    env = {k: v for k, v in command.env.items() if k not in NOT_COMPILED_ENV}
    payload = json.dumps(
        {"generation": str(spec.generation), "args": args, "env": env}, sort_keys=True
    )
    return hashlib.sha256(payload.encode()).hexdigest()


def read_marker(directory: str | Path) -> dict | None:
    marker = Path(directory) / MARKER_NAME
    try:
        data = json.loads(marker.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def marker_payload(spec: ServingSpec, files: list[str]) -> str:
    return json.dumps(
        {
            "service_name": spec.service_name,
            "fingerprint": compile_fingerprint(spec),
            "files": sorted(files),
        },
        indent=2,
        sort_keys=True,
    )
