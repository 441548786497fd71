"""Guardrails on live traffic (``config.guardrails.live``): the Prometheus workspace that
evaluates guardrails/rules.py, the managed collector that scrapes both arms and the gateway into
it, and the Argo Rollouts controller's right to query it.

- ``GuardrailWorkspace`` (Observability stack, next to the notification topic): an Amazon
  Managed Service for Prometheus workspace with its rule groups namespace (the YAML of
  ``rule_set(config, serving.generation).prometheus()``), its Alertmanager definition routing
  every alert to the topic, and its vended logs (rule evaluation and Alertmanager errors) in a
  KMS-encrypted log group. ``query_url`` is what the rollback analysis queries with SigV4.
- ``GuardrailCollector`` (Cluster stack): the agentless managed collector (``AWS::APS::Scraper``)
  in the cluster's private subnets with a security group of its own, scraping with
  ``charts.rollout.managed_scrape_config``.

Data at rest in the workspace uses AMP's AWS owned key, not a customer managed one: a workspace
with a customer managed key takes no scraper using the service-linked role; the scraper must
then carry a RoleConfiguration whose source and target roles trust the scraper's own ARN (AMP
user guide, "Using an AWS managed collector", "Creating scraper for workspaces enabled with
customer managed keys"), which CloudFormation knows only once the scraper exists.

The collector's access to the cluster: the cluster's authentication mode is API
(aws_eks_v2's default, asserted by tests/stacks/test_guardrails.py), and with it AMP creates the
scraper's EKS access entry and its access policy itself when the scraper is created (AMP user
guide, "Configure Amazon EKS for scraper access with access entries": read-only get/list/watch
of nodes, services, endpoints, pods, ingresses, configmaps and GET /metrics). An access entry of
our own for the same role would fail with "access entry resource is already in use".
"""

from __future__ import annotations

import base64
from typing import Any

import aws_cdk as cdk
import yaml
from aws_cdk import aws_aps as aps
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sns as sns
from constructs import Construct

from charts.rollout import managed_scrape_config
from experiment import ExperimentConfig
from guardrails.rules import rule_set
from guardrails.scrape import ENVOY_GATEWAY_METRICS_PORT

APS_PRINCIPAL = "aps.amazonaws.com"
# AMP user guide, "Scraper configuration" (limitations of AWS managed collectors): the scraper
# config can't specify a scrape interval of less than 30 seconds.
MIN_COLLECTOR_SCRAPE_INTERVAL_S = 30
# The Pushgateway's default listen port (prometheus/pushgateway README, --web.listen-address).
PUSHGATEWAY_PORT = 9091
RECEIVER = "guardrails"


def yaml_text(document: dict[str, Any]) -> str:
    return yaml.safe_dump(document, sort_keys=False, default_flow_style=False)


def scrape_configuration(config: ExperimentConfig) -> dict[str, Any]:
    """The collector's Prometheus configuration, as the charts render it: both arms as the
    Rollout's pods told apart by the arm label, the gateway's Envoy pods by the labels Envoy
    Gateway gives them (charts.rollout.managed_scrape_config; charts.symmetry proves it
    scrapes both arms alike)."""
    return managed_scrape_config(config)


def scrape_ports(config: ExperimentConfig) -> list[int]:
    """The pod ports the collector reaches: vLLM's, Envoy Gateway's metrics port, and the
    Pushgateway's when the probe runs."""
    ports = [config.serving.port, ENVOY_GATEWAY_METRICS_PORT]
    if config.guardrails.probe.enabled:
        ports.append(PUSHGATEWAY_PORT)
    return ports


def alertmanager_definition(config: ExperimentConfig, topic_arn: str, region: str) -> str:
    """The workspace's Alertmanager definition: every alert to the topic (AMP user guide,
    "Configure alert manager to send messages to your Amazon SNS topic": sns_configs with
    topic_arn and a sigv4 region; api_url and http_config are not allowed). The CloudFormation
    property wraps the Alertmanager YAML in ``alertmanager_config`` (CloudFormation reference,
    AWS::APS::Workspace AlertManagerDefinition)."""
    alertmanager = {
        "route": {
            "receiver": RECEIVER,
            "group_by": ["alertname", "arm", "route", "class"],
        },
        "receivers": [
            {
                "name": RECEIVER,
                "sns_configs": [
                    {
                        "topic_arn": topic_arn,
                        "sigv4": {"region": region},
                        "subject": f"{config.project} guardrail alert",
                    }
                ],
            }
        ],
    }
    return yaml_text({"alertmanager_config": yaml_text(alertmanager)})


def check_collector_config(config: ExperimentConfig) -> None:
    live = config.guardrails.live
    if live.scrape_interval_s < MIN_COLLECTOR_SCRAPE_INTERVAL_S:
        raise ValueError(
            f"guardrails.live.scrape_interval_s {live.scrape_interval_s} is below the "
            f"{MIN_COLLECTOR_SCRAPE_INTERVAL_S} s the managed collector accepts on EKS; set it "
            f"to at least {MIN_COLLECTOR_SCRAPE_INTERVAL_S} (or set guardrails.live.enabled "
            "false)"
        )


class GuardrailWorkspace(Construct):
    """The workspace, its rules, its alert routing to ``topic`` and its logs."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: ExperimentConfig,
        topic: sns.Topic,
        topic_key: kms.Key,
        logs_key: kms.IKey,
    ) -> None:
        super().__init__(scope, construct_id)
        check_collector_config(config)
        stack = cdk.Stack.of(self)
        self.region = stack.region
        log_group = logs.LogGroup(
            self,
            "Logs",
            encryption_key=logs_key,
            removal_policy=cdk.RemovalPolicy.DESTROY,
        )
        cfn_group: logs.CfnLogGroup = log_group.node.default_child  # type: ignore[assignment]
        cfn_group.retention_in_days = config.network.flow_logs_retention_days
        self.workspace = aps.CfnWorkspace(
            self,
            "Workspace",
            alias=f"{config.project}-guardrails",
            alert_manager_definition=alertmanager_definition(config, topic.topic_arn, stack.region),
            # The log group's Arn attribute ends in ":*", the form AMP's LogGroupArn takes.
            logging_configuration=aps.CfnWorkspace.LoggingConfigurationProperty(
                log_group_arn=log_group.log_group_arn
            ),
        )
        self.rules = rule_set(config, config.serving.generation)
        self.rule_groups = aps.CfnRuleGroupsNamespace(
            self,
            "Rules",
            workspace=self.workspace.attr_arn,
            name=f"{config.project}-guardrails",
            data=yaml_text(self.rules.prometheus()),
        )
        self.arn = self.workspace.attr_arn
        # The Prometheus-compatible query root (AMP user guide, "Query using Prometheus-compatible
        # APIs"; argo-rollouts docs/analysis/prometheus.md, "Utilizing Amazon Managed
        # Prometheus": address https://aps-workspaces.<region>.amazonaws.com/workspaces/<id>).
        self.query_url = (
            f"https://aps-workspaces.{stack.region}.{stack.url_suffix}/workspaces/"
            f"{self.workspace.attr_workspace_id}"
        )
        # Alertmanager publishes as the AMP service: the topic policy names this workspace.
        topic.add_to_resource_policy(
            iam.PolicyStatement(
                principals=[iam.ServicePrincipal(APS_PRINCIPAL)],
                actions=["sns:Publish"],
                resources=[topic.topic_arn],
                conditions={
                    "StringEquals": {"aws:SourceAccount": stack.account},
                    "ArnEquals": {"aws:SourceArn": self.workspace.attr_arn},
                },
            )
        )
        # ...and needs the topic's key (SNS developer guide, "Enable compatibility between event
        # sources from AWS services and encrypted topics"). The key policy cannot name the
        # workspace's ARN (key -> workspace -> topic -> key would be a cycle): it names the
        # account's workspaces in this region.
        topic_key.add_to_resource_policy(
            iam.PolicyStatement(
                principals=[iam.ServicePrincipal(APS_PRINCIPAL)],
                actions=["kms:Decrypt", "kms:GenerateDataKey*"],
                resources=["*"],  # in a key policy, "*" is this key
                conditions={
                    "StringEquals": {"aws:SourceAccount": stack.account},
                    "ArnLike": {
                        "aws:SourceArn": stack.format_arn(
                            service="aps", resource="workspace", resource_name="*"
                        )
                    },
                },
            )
        )


class GuardrailCollector(Construct):
    """The managed collector scraping the cluster into the workspace."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: ExperimentConfig,
        vpc: ec2.IVpc,
        cluster_arn: str,
        cluster_security_group: ec2.ISecurityGroup,
        workspace_arn: str,
    ) -> None:
        super().__init__(scope, construct_id)
        check_collector_config(config)
        # The collector's network interfaces: nothing comes in, out only to the pods' metrics
        # ports and the API server (discovery), all inside the VPC.
        self.security_group = ec2.SecurityGroup(
            self,
            "SecurityGroup",
            vpc=vpc,
            description=f"{config.project}: AMP managed collector (guardrail metrics)",
            allow_all_outbound=False,
        )
        vpc_cidr = ec2.Peer.ipv4(vpc.vpc_cidr_block)
        # The pods use the nodes' security group (VPC CNI), and the API server's private
        # endpoint the same one: the cluster security group EKS attaches to managed node groups
        # and to its control-plane interfaces.
        for port, purpose in [
            (443, "EKS API server: pod discovery"),
            *((port, f"scrape pods on {port}") for port in scrape_ports(config)),
        ]:
            self.security_group.add_egress_rule(vpc_cidr, ec2.Port.tcp(port), purpose)
            cluster_security_group.add_ingress_rule(
                self.security_group, ec2.Port.tcp(port), f"AMP collector: {purpose}"
            )
        self.configuration = scrape_configuration(config)
        private = vpc.select_subnets(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS)
        self.scraper = aps.CfnScraper(
            self,
            "Scraper",
            alias=f"{config.project}-guardrails",
            source=aps.CfnScraper.SourceProperty(
                eks_configuration=aps.CfnScraper.EksConfigurationProperty(
                    cluster_arn=cluster_arn,
                    subnet_ids=private.subnet_ids,
                    security_group_ids=[self.security_group.security_group_id],
                )
            ),
            destination=aps.CfnScraper.DestinationProperty(
                amp_configuration=aps.CfnScraper.AmpConfigurationProperty(
                    workspace_arn=workspace_arn
                )
            ),
            # CloudFormation reference, AWS::APS::Scraper ScrapeConfiguration:
            # ConfigurationBlob is the base64-encoded Prometheus configuration YAML.
            scrape_configuration=aps.CfnScraper.ScrapeConfigurationProperty(
                configuration_blob=base64.b64encode(yaml_text(self.configuration).encode()).decode()
            ),
        )
        # The service-linked role AMP scrapes with (its access entry is AMP's own, see above).
        self.role_arn = self.scraper.attr_role_arn
