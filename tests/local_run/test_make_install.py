"""The Makefile's install and `make local` recipes, as `make -n` prints them (nothing runs).

uv reads no pip configuration, so the Makefile hands pip's configured indexes, wheel
directories and constraints to uv as flags: a configuration of our own (PIP_CONFIG_FILE and
a PIP_* variable) must come out as exactly those flags.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.process,
    pytest.mark.skipif(shutil.which("make") is None, reason="needs make"),
]


def dry_run(target: str, venv: Path, env: dict[str, str]) -> str:
    result = subprocess.run(
        ["make", "--no-print-directory", "-n", target, f"VENV={venv}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return result.stdout


def test_uv_gets_the_indexes_wheel_dirs_and_constraints_configured_for_pip(
    tmp_path: Path,
) -> None:
    config = tmp_path / "pip.conf"
    config.write_text(
        "[global]\n"
        "index-url = https://mirror.example/simple\n"
        "extra-index-url = https://one.example/simple https://two.example/simple\n"
        f"constraint = {tmp_path / 'constraints.txt'}\n"
    )
    env = {**os.environ, "PIP_CONFIG_FILE": str(config), "PIP_FIND_LINKS": str(tmp_path)}
    venv = tmp_path / "venv"
    lines = dry_run(f"{venv}/.installed-local", venv, env).splitlines()
    install = next(line for line in lines if " pip install " in line and "/uv " in line)
    for flag in (
        "--index-url https://mirror.example/simple",
        "--extra-index-url https://one.example/simple",
        "--extra-index-url https://two.example/simple",
        f"--find-links {tmp_path} ",
        f"--constraints {tmp_path / 'constraints.txt'}",
        "--index-strategy unsafe-best-match",
        f"--python {venv}/bin/python",
    ):
        assert flag in install + " ", flag
    assert install.endswith("-e '.[local]'")
    assert "--compile-bytecode" in install  # as pip does: no process compiles at import
    assert lines[0] == f"python3 -m venv {venv}"
    uninstall = next(line for line in lines if " pip uninstall " in line)
    assert uninstall.endswith("torchvision torchaudio torchcodec")


def test_the_full_install_compiles_bytecode_and_takes_every_extra(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    text = dry_run(f"{venv}/.installed", venv, dict(os.environ))
    install = next(line for line in text.splitlines() if " pip install " in line and "/uv " in line)
    assert "--compile-bytecode" in install
    assert install.endswith("-e '.[infra,loadtest,local,dev]'")
