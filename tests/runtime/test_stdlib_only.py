"""runtime/ runs inside the Neuron DLC: standard library (and itself) only."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from charts.runtime_package import PACKAGE_DIR, package_files

pytestmark = pytest.mark.infra

SYSTEM_PYTHON = Path("/usr/bin/python3")


def _imported_roots(source: str) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def test_runtime_imports_only_stdlib_and_itself() -> None:
    allowed = set(sys.stdlib_module_names) | {"runtime", "__future__"}
    offenders = {
        name: sorted(_imported_roots(source) - allowed)
        for name, source in package_files().items()
        if _imported_roots(source) - allowed
    }
    assert offenders == {}, f"non-stdlib imports in runtime/: {offenders}"


def test_scan_catches_a_third_party_import() -> None:
    assert "pydantic" in _imported_roots("import os\nfrom pydantic import BaseModel\n")


@pytest.mark.skipif(not SYSTEM_PYTHON.exists(), reason="needs a system Python 3.11+")
@pytest.mark.parametrize(
    ("profile", "expected"),
    [("reproduce", "enable_fused_speculation"), ("new-deployment", '"neuron_config"')],
)
def test_shipped_files_run_without_site_packages(
    tmp_path: Path, profile: str, expected: str
) -> None:
    """What the ConfigMap ships renders a spec under `python -S` (no site-packages)."""
    package = tmp_path / PACKAGE_DIR.name
    package.mkdir()
    for name, source in package_files().items():
        (package / name).write_text(source)
    from experiment import build_config
    from experiment.config import Arm

    spec_file = tmp_path / "spec.json"
    config = build_config({"experiment.serving.profile": profile})
    spec_file.write_text(config.serving_spec(Arm.SPECULATIVE).to_json())
    result = subprocess.run(
        [str(SYSTEM_PYTHON), "-S", "-m", "runtime.serve", "--spec", str(spec_file),
         "--dry-run", "--skip-file-checks"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
        env={"PYTHONPATH": str(tmp_path)},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "--speculative-config" in result.stdout
    assert expected in result.stdout
