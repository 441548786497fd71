"""The test tiers keep their names: tests/conftest.py fails a test that starts a process or
opens a socket without a marker saying so, and `-m` leaves a module it wholly deselects
unimported (the fast tier's venv lacks the CDK, cdk8s and torch such modules import)."""

from __future__ import annotations

from pathlib import Path

import pytest

CONFTEST = Path(__file__).resolve().parent / "conftest.py"
FAST = "not (integration or infra or process or train)"  # the Makefile's FAST_MARKERS

pytestmark = pytest.mark.process  # runs pytest in a subprocess


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    """A test folder with this repository's conftest.py and markers."""
    pytester.makeconftest(CONFTEST.read_text())
    pytester.makeini(
        "[pytest]\naddopts = --strict-markers\nmarkers =\n"
        "    integration: i\n    infra: i\n    process: p\n    train: t\n"
    )
    return pytester


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
