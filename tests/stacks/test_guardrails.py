"""Live guardrails on EKS (stacks/guardrails.py): the workspace, its rules and alert routing,
the managed collector, the cluster access it relies on, and the rollback analysis' query
rights; none of it with ``guardrails.live.enabled`` false."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
import yaml
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from cdk_synth import Synthesized, synthesize

from charts.naming import ARM_LABEL
from experiment import Arm, build_config
from guardrails.rules import ARM, jobs, rule_set
from guardrails.scrape import ENVOY_GATEWAY_METRICS_PORT, pod_meta_label
from stacks.gateway import ANALYSIS_QUERY_ACTIONS
from stacks.guardrails import (
    MIN_COLLECTOR_SCRAPE_INTERVAL_S,
    GuardrailWorkspace,
    scrape_configuration,
)

pytestmark = [pytest.mark.infra, pytest.mark.timeout(300)]

APS_PRINCIPAL = {"Service": "aps.amazonaws.com"}


@pytest.fixture(scope="module")
def synth_off(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    overrides = {"experiment.guardrails.live.enabled": "false"}
    return synthesize(overrides, tmp_path_factory.mktemp("cdk.out-live-off"))


def _one(synth: Synthesized, stack: str, type_name: str) -> tuple[str, dict[str, Any]]:
    (item,) = synth.resources(stack, type_name).items()
    return item


def _scrape(synth: Synthesized) -> dict[str, Any]:
    _, scraper = _one(synth, "Cluster", "AWS::APS::Scraper")
    blob = scraper["Properties"]["ScrapeConfiguration"]["ConfigurationBlob"]
    return yaml.safe_load(base64.b64decode(blob))


def test_workspace_logs_to_an_encrypted_log_group(synth) -> None:
    _, workspace = _one(synth, "Observability", "AWS::APS::Workspace")
    log_arn = workspace["Properties"]["LoggingConfiguration"]["LogGroupArn"]
    log_group_id = log_arn["Fn::GetAtt"][0]
    log_group = synth.templates["Observability"]["Resources"][log_group_id]
    assert log_group["Type"] == "AWS::Logs::LogGroup"
    assert log_group["Properties"]["KmsKeyId"]
    assert log_group["Properties"]["RetentionInDays"] > 0


def test_rule_groups_are_the_rule_set(synth) -> None:
    _, rules = _one(synth, "Observability", "AWS::APS::RuleGroupsNamespace")
    config = synth.config
    expected = rule_set(config, config.serving.generation).prometheus()
    assert yaml.safe_load(rules["Properties"]["Data"]) == expected
    workspace_id, _ = _one(synth, "Observability", "AWS::APS::Workspace")
    assert rules["Properties"]["Workspace"] == {"Fn::GetAtt": [workspace_id, "Arn"]}


def test_scraper_scrapes_both_arms_alike_and_the_gateway_into_the_workspace(synth) -> None:
    config = synth.config
    scrape = _scrape(synth)
    assert scrape == scrape_configuration(config)
    interval = int(scrape["global"]["scrape_interval"].rstrip("s"))
    assert interval >= MIN_COLLECTOR_SCRAPE_INTERVAL_S
    by_job = {job["job_name"]: job for job in scrape["scrape_configs"]}
    names = jobs(config)
    # One job for both arms: the same path, interval and relabelling; only `arm` differs.
    vllm = by_job[names["vllm"]]
    (arm_keep,) = (
        r
        for r in vllm["relabel_configs"]
        if r.get("action") == "keep" and r["source_labels"] == [pod_meta_label(ARM_LABEL)]
    )
    assert set(arm_keep["regex"].split("|")) == {arm.value for arm in Arm}
    assert any(r.get("target_label") == ARM for r in vllm["relabel_configs"])
    assert vllm["kubernetes_sd_configs"] == [
        {"role": "pod", "namespaces": {"names": [config.serving.namespace]}}
    ]
    gateway = by_job[names["gateway"]]
    assert {"regex": str(ENVOY_GATEWAY_METRICS_PORT)}.items() <= next(
        r for r in gateway["relabel_configs"] if "port_number" in r["source_labels"][0]
    ).items()
    # Every job discovers pods in the project's namespaces only: no static (public) target.
    for job in scrape["scrape_configs"]:
        assert "static_configs" not in job
        for sd in job["kubernetes_sd_configs"]:
            assert sd["namespaces"]["names"]
    _, scraper = _one(synth, "Cluster", "AWS::APS::Scraper")
    props = scraper["Properties"]
    assert (
        props["Destination"]["AmpConfiguration"]["WorkspaceArn"]["Fn::GetStackOutput"]["StackName"]
        == f"{config.project}-observability"
    )
    eks_source = props["Source"]["EksConfiguration"]
    cluster_id, _ = _one(synth, "Cluster", "AWS::EKS::Cluster")
    assert eks_source["ClusterArn"] == {"Fn::GetAtt": [cluster_id, "Arn"]}
    subnets = eks_source["SubnetIds"]
    assert len(subnets) >= 2  # the AMP user guide: at least two subnets in two AZs
    for subnet in subnets:
        assert "privateSubnet" in subnet["Fn::GetStackOutput"]["OutputName"]


def test_collector_security_group_is_its_own_and_reaches_only_the_scraped_ports(synth) -> None:
    config = synth.config
    _, scraper = _one(synth, "Cluster", "AWS::APS::Scraper")
    (group_ref,) = scraper["Properties"]["Source"]["EksConfiguration"]["SecurityGroupIds"]
    group_id = group_ref["Fn::GetAtt"][0]
    group = synth.templates["Cluster"]["Resources"][group_id]["Properties"]
    assert "SecurityGroupIngress" not in group
    egress = {(rule["FromPort"], rule["ToPort"]) for rule in group["SecurityGroupEgress"]}
    ports = {443, config.serving.port, ENVOY_GATEWAY_METRICS_PORT, 9091}
    assert egress == {(port, port) for port in ports}
    for rule in group["SecurityGroupEgress"]:
        assert "CidrIp" in rule and rule["CidrIp"] != "0.0.0.0/0"
    ingress = [
        r["Properties"]
        for r in synth.resources("Cluster", "AWS::EC2::SecurityGroupIngress").values()
        if r["Properties"].get("SourceSecurityGroupId") == {"Fn::GetAtt": [group_id, "GroupId"]}
    ]
    assert {(r["FromPort"], r["ToPort"]) for r in ingress} == {(p, p) for p in ports}


def test_collector_gets_its_access_entry_from_amp_through_the_api_mode(synth) -> None:
    # AMP creates the scraper's access entry itself on a cluster whose authentication mode
    # includes the API (stacks/guardrails.py); the scraper needs the private endpoint.
    _, cluster = _one(synth, "Cluster", "AWS::EKS::Cluster")
    props = cluster["Properties"]
    assert props["AccessConfig"]["AuthenticationMode"] in ("API", "API_AND_CONFIG_MAP")
    assert props["ResourcesVpcConfig"]["EndpointPrivateAccess"] is True
    # ...so no access entry of ours names the scraper's role (it would collide with AMP's).
    scraper_id, _ = _one(synth, "Cluster", "AWS::APS::Scraper")
    for entry in synth.resources("Cluster", "AWS::EKS::AccessEntry").values():
        assert scraper_id not in json.dumps(entry["Properties"]["PrincipalArn"])


def _statements(template: dict[str, Any], type_name: str, key: str) -> list[dict[str, Any]]:
    return [
        statement
        for resource in template["Resources"].values()
        if resource["Type"] == type_name
        for statement in resource["Properties"][key]["Statement"]
    ]


def test_alerts_route_to_the_topic_the_workspace_may_publish_to(synth) -> None:
    template = synth.templates["Observability"]
    workspace_id, workspace = _one(synth, "Observability", "AWS::APS::Workspace")
    topic_id, _ = _one(synth, "Observability", "AWS::SNS::Topic")
    separator, parts = workspace["Properties"]["AlertManagerDefinition"]["Fn::Join"]
    assert {"Ref": topic_id} in parts
    text = separator.join(p if isinstance(p, str) else "TOPIC" for p in parts)
    alertmanager = yaml.safe_load(yaml.safe_load(text)["alertmanager_config"])
    receiver = alertmanager["route"]["receiver"]
    (routed,) = [r for r in alertmanager["receivers"] if r["name"] == receiver]
    (sns_config,) = routed["sns_configs"]
    assert sns_config["topic_arn"] == "TOPIC"
    assert sns_config["sigv4"]["region"] == synth.config.region
    assert not {"api_url", "http_config"} & set(sns_config)  # refused by AMP
    (publish,) = [
        s
        for s in _statements(template, "AWS::SNS::TopicPolicy", "PolicyDocument")
        if s.get("Principal") == APS_PRINCIPAL
    ]
    assert publish["Effect"] == "Allow" and publish["Action"] == "sns:Publish"
    assert publish["Resource"] == {"Ref": topic_id}
    assert publish["Condition"]["ArnEquals"]["aws:SourceArn"] == {
        "Fn::GetAtt": [workspace_id, "Arn"]
    }
    assert "aws:SourceAccount" in publish["Condition"]["StringEquals"]
    (key_grant,) = [
        s
        for s in _statements(template, "AWS::KMS::Key", "KeyPolicy")
        if s.get("Principal") == APS_PRINCIPAL
    ]
    assert sorted(key_grant["Action"]) == ["kms:Decrypt", "kms:GenerateDataKey*"]
    assert "aws:SourceAccount" in key_grant["Condition"]["StringEquals"]
    assert ":workspace/*" in json.dumps(key_grant["Condition"]["ArnLike"]["aws:SourceArn"])


def test_rollouts_role_queries_the_workspace_read_only(synth) -> None:
    aps_statements = [
        s
        for s in _statements(synth.templates["Cluster"], "AWS::IAM::Policy", "PolicyDocument")
        if any(a.startswith("aps:") for a in _actions(s))
    ]
    (query,) = aps_statements
    # The controller's provider calls only the query endpoints (stacks/gateway.py).
    assert _actions(query) == list(ANALYSIS_QUERY_ACTIONS)
    # The workspace's ARN (a cross-stack output), never a wildcard.
    output = query["Resource"]["Fn::GetStackOutput"]
    workspace_id, _ = _one(synth, "Observability", "AWS::APS::Workspace")
    assert output["OutputName"].startswith(f"PublishOutputFnGetAtt{workspace_id}Arn")
    assert output["StackName"] == f"{synth.config.project}-observability"


def _actions(statement: dict[str, Any]) -> list[str]:
    actions = statement["Action"]
    return [actions] if isinstance(actions, str) else actions


def test_no_live_guardrails_no_workspace_collector_or_grant(synth_off) -> None:
    for template in synth_off.templates.values():
        types = {resource["Type"] for resource in template["Resources"].values()}
        assert not {t for t in types if t.startswith("AWS::APS::")}
        assert "AWS::SNS::Topic" not in types  # no e-mail either
        assert "aps:QueryMetrics" not in json.dumps(template)


def test_query_url_is_the_workspace_query_root() -> None:
    app = cdk.App()
    stack = cdk.Stack(app, "Probe", env=cdk.Environment(region="us-east-2"))
    key = kms.Key(stack, "Key")
    workspace = GuardrailWorkspace(
        stack,
        "Live",
        config=build_config({}),
        topic=sns.Topic(stack, "Topic", master_key=key),
        topic_key=key,
        logs_key=key,
    )
    separator, parts = stack.resolve(workspace.query_url)["Fn::Join"]
    assert parts[0] == "https://aps-workspaces.us-east-2."
    assert {"Fn::GetAtt": [stack.get_logical_id(workspace.workspace), "WorkspaceId"]} in parts
    assert separator == "" and "/workspaces/" in "".join(p for p in parts if isinstance(p, str))


def test_collector_refuses_a_scrape_interval_it_cannot_honour(tmp_path: Path) -> None:
    overrides = {
        "experiment.guardrails.live.scrape_interval_s": "15",
        "experiment.guardrails.live.window_s": "60",
    }
    with pytest.raises(ValueError, match=r"scrape_interval_s 15 is below the 30 s"):
        synthesize(overrides, tmp_path)
