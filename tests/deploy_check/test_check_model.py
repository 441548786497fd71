"""The report of ``python -m experiment check`` (deploy_check/model.py): grouped as linkerd
check prints, each check marked, its detail and fix under it, the verdict last; the exit code
is 1 when a check failed, skips included or not."""

from __future__ import annotations

from deploy_check.model import Group, Result, exit_code, render, skip_all


def test_the_report_groups_marks_and_explains_each_check() -> None:
    results = [
        Result.passed(Group.SERVING, "the baseline arm serves m", "GET /v1/models lists it"),
        Result.failed(
            Group.CLUSTER,
            "the nodes are Ready",
            "0 Ready of 1\nnode-a: NotReady",
            "kubectl describe node node-a",
        ),
        Result.skipped(Group.LOADTEST, "the load-test Job", "--local"),
    ]
    assert render(results) == (
        "Cluster and nodes\n"
        "-----------------\n"
        "✗ the nodes are Ready\n"
        "    0 Ready of 1\n"
        "    node-a: NotReady\n"
        "    fix: kubectl describe node node-a\n"
        "\n"
        "Serving\n"
        "-------\n"
        "✓ the baseline arm serves m\n"
        "    GET /v1/models lists it\n"
        "\n"
        "Load test\n"
        "---------\n"
        "- the load-test Job\n"
        "    skipped: --local\n"
        "\n"
        "Status check results are ✗ (1 passed, 1 failed, 1 skipped)\n"
    )


def test_passes_and_skips_exit_0_a_failure_exits_1() -> None:
    passing = [Result.passed(Group.SERVING, "a"), *skip_all(Group.TELEMETRY, ["b", "c"], "why")]
    assert exit_code(passing) == 0
    assert render(passing).endswith("Status check results are ✓ (1 passed, 0 failed, 2 skipped)\n")
    assert exit_code([*passing, Result.failed(Group.SERVING, "d", "seen", "fix")]) == 1
