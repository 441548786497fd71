"""cfn-lint and cdk-nag over the synthesized app."""

from __future__ import annotations

import json

import aws_cdk as cdk
import pytest
from aws_cdk import aws_s3 as s3
from cfnlint.api import ManualArgs, lint_file

from stacks.nag import acknowledge, add_checks

pytestmark = pytest.mark.infra


@pytest.mark.parametrize("result", ["synth", "synth_options", "synth_reservation"])
def test_cfn_lint_reports_no_errors(request, result: str) -> None:
    synthesized = request.getfixturevalue(result)
    templates = sorted(synthesized.outdir.glob("*.template.json"))
    assert len(templates) == len(synthesized.templates)
    for template in templates:
        matches = lint_file(template, ManualArgs(regions=[synthesized.config.region]))
        errors = [f"{m.rule.id} {m.message} ({m.path})" for m in matches if m.rule.id[0] == "E"]
        assert errors == [], template.name


@pytest.mark.parametrize("result", ["synth", "synth_options", "synth_reservation"])
def test_cdk_nag_has_no_unacknowledged_findings(request, result: str) -> None:
    # Synth itself fails on an unacknowledged finding; the report confirms the pack ran.
    synthesized = request.getfixturevalue(result)
    report = json.loads((synthesized.outdir / "validation-report.json").read_text())
    plugins = {plugin["pluginName"]: plugin for plugin in report["pluginReports"]}
    assert "AwsSolutions" in plugins
    for name, plugin in plugins.items():
        assert plugin["conclusion"] == "success", (name, plugin.get("violations"))


def test_cdk_nag_fails_synth_on_an_unacknowledged_finding(tmp_path) -> None:
    app = cdk.App(outdir=str(tmp_path))
    add_checks(app)
    stack = cdk.Stack(app, "Probe")
    s3.Bucket(stack, "NoLogsNoTls")
    with pytest.raises(RuntimeError, match="ValidationFailed"):
        app.synth()
    report = (tmp_path / "validation-report.json").read_text()
    assert "AwsSolutions-S1" in report and "AwsSolutions-S10" in report


def test_an_acknowledgment_needs_the_exact_finding(tmp_path) -> None:
    app = cdk.App(outdir=str(tmp_path))
    add_checks(app)
    stack = cdk.Stack(app, "Probe")
    bucket = s3.Bucket(stack, "NoLogs", enforce_ssl=True)
    acknowledge(bucket, "AwsSolutions-S1", "probe: access logs deliberately off")
    app.synth()  # S1 acknowledged, S10 satisfied: passes
