"""checkov (cloudformation framework) on the synthesized templates: no unacknowledged finding.

Every accepted finding is a ``Metadata.checkov.skip`` entry with its reason, written by
``stacks/checkov.py`` (aws-cdk-lib's own handler Lambdas) or ``acknowledge_checkov`` next to the
resource. checkov lives in its own venv (`make scan-install`).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_lambda as lambda_

from stacks.checkov import CDK_HANDLER_FINDINGS, METADATA_KEY, AcknowledgeCdkHandlers

pytestmark = [pytest.mark.infra, pytest.mark.timeout(600)]

FRAMEWORK = "cloudformation"


def _write(tmp_path: Path, templates: dict[str, dict[str, Any]]) -> Path:
    for stack, template in templates.items():
        (tmp_path / f"{stack}.template.json").write_text(json.dumps(template))
    return tmp_path


@pytest.mark.infra
@pytest.mark.integration
@pytest.mark.parametrize("result", ["synth", "synth_options", "synth_reservation"])
def test_templates_pass_checkov_with_reasoned_skips_only(
    request, tmp_path, run_checkov, result: str
) -> None:
    synthesized = request.getfixturevalue(result)
    report = run_checkov(_write(tmp_path, synthesized.templates), FRAMEWORK)
    failed = [(c["check_id"], c["resource"]) for c in report["results"]["failed_checks"]]
    assert failed == []
    assert report["summary"]["passed"] > 100
    assert report["summary"]["parsing_errors"] == 0
    for skipped in report["results"]["skipped_checks"]:
        reason = skipped["check_result"].get("suppress_comment") or ""
        assert len(reason) > 20, f"{skipped['check_id']} skipped without a reason"


@pytest.mark.infra
@pytest.mark.integration
def test_checkov_would_catch_unencrypted_logs_and_unacknowledged_handlers(
    synth, tmp_path, run_checkov
) -> None:
    broken = copy.deepcopy(synth.templates)
    for template in broken.values():
        for resource in template["Resources"].values():
            resource.get("Metadata", {}).pop(METADATA_KEY, None)
            if resource["Type"] == "AWS::Logs::LogGroup":
                resource["Properties"].pop("KmsKeyId", None)
    report = run_checkov(_write(tmp_path, broken), FRAMEWORK)
    failed = {c["check_id"] for c in report["results"]["failed_checks"]}
    assert "CKV_AWS_158" in failed  # log group not encrypted with KMS
    assert set(CDK_HANDLER_FINDINGS) - {"CKV_AWS_117"} <= failed
    assert {"CKV_AWS_18", "CKV_AWS_21"} <= failed  # the access-log bucket


@pytest.mark.infra
def test_only_cdk_owned_handlers_are_acknowledged(tmp_path) -> None:
    app = cdk.App(outdir=str(tmp_path))
    cdk.Aspects.of(app).add(AcknowledgeCdkHandlers())
    stack = cdk.Stack(app, "Probe")
    code = lambda_.Code.from_inline("def handler(event, context):\n    return None\n")
    for construct_id in ("OurFunction", "KubectlProvider"):
        lambda_.Function(
            stack,
            construct_id,
            runtime=lambda_.Runtime.PYTHON_3_13,
            handler="index.handler",
            code=code,
        )
    resources = app.synth().get_stack_by_name("Probe").template["Resources"]
    skips = {
        logical_id: resource.get("Metadata", {}).get(METADATA_KEY, {}).get("skip", [])
        for logical_id, resource in resources.items()
        if resource["Type"] == "AWS::Lambda::Function"
    }
    ours = next(v for k, v in skips.items() if k.startswith("OurFunction"))
    cdk_owned = next(v for k, v in skips.items() if k.startswith("KubectlProvider"))
    assert ours == []  # a Lambda of our own is checked in full
    assert {s["id"]: s["comment"] for s in cdk_owned} == CDK_HANDLER_FINDINGS
