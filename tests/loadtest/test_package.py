"""Importing a piece of the load test loads only that piece: a Locust worker or ``tune``
that needs ``loadtest.stats`` gets no runner, no report renderers and no matplotlib."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _modules_after(statement: str) -> set[str]:
    # A fresh interpreter: this test process has imported everything already.
    code = f"{statement}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return set(json.loads(result.stdout))


@pytest.mark.process
def test_importing_loadtest_stats_loads_no_plotting_and_no_runner() -> None:
    loaded = _modules_after("import loadtest.stats")
    assert "matplotlib" not in loaded
    assert {"loadtest.runner", "loadtest.report", "loadtest.render.plots"}.isdisjoint(loaded)


@pytest.mark.process
def test_the_package_names_load_on_first_use() -> None:
    loaded = _modules_after("import loadtest")
    assert "matplotlib" not in loaded and "loadtest.runner" not in loaded
    used = _modules_after("from loadtest import run_comparison, local_scale")
    assert {"loadtest.runner", "loadtest.plan"} <= used
