"""Guardrail alarms: speculation stopped paying, requests fail, or SD changed the output.

One CloudWatch alarm per guardrail of ``guardrails.cloudwatch`` (the list the rollback
analysis renders too when the live guardrails are off, charts/rollout.py), over the metrics
the load test publishes (loadtest/cloudwatch.py): its name, metric, dimensions, statistic,
period, threshold and evaluation periods. Namespace, metric and dimension names and the
Variant labels come from ``config.loadtest``, so publisher and alarm cannot drift apart
(tests/stacks/test_alarms.py publishes a run's metrics to moto and matches every alarm).

Missing data is "not breaching" (CloudWatch User Guide, "Configuring how CloudWatch alarms
treat missing data": notBreaching treats missing data points as within the threshold; CDK
``TreatMissingData.NOT_BREACHING``): a run publishes once, so no run means no alarm, and an
acceptance that is not available (nothing published) cannot fire one. With
``guardrails.alarm_email`` set, or the live guardrails on (their Alertmanager notifies the same
topic), every alarm (and its recovery) notifies a KMS-encrypted SNS topic; the e-mail
subscription exists only with an address.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from constructs import Construct

from experiment import ExperimentConfig
from guardrails.cloudwatch import CloudWatchGuardrail, cloudwatch_guardrails

_COMPARISON = {
    "at_least": cw.ComparisonOperator.LESS_THAN_THRESHOLD,
    "at_most": cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
}


def _construct_id(text: str) -> str:
    return "".join(part.capitalize() for part in text.replace("-", "_").split("_") if part)


class GuardrailAlarms(Construct):
    """The guardrail alarms of ``config.guardrails`` (and their SNS topic when configured)."""

    def __init__(self, scope: Construct, construct_id: str, *, config: ExperimentConfig) -> None:
        super().__init__(scope, construct_id)
        guard = config.guardrails
        self.config = config
        self.alarms = [self._alarm(found) for found in cloudwatch_guardrails(config)]
        self.topic: sns.Topic | None = None
        self.topic_key: kms.Key | None = None
        # The live guardrails' Alertmanager notifies the topic too (stacks/guardrails.py), so it
        # exists whenever they are on; only the e-mail subscription needs an address.
        if guard.alarm_email or guard.live.enabled:
            self.topic = self._topic(guard.alarm_email)
            action = cw_actions.SnsAction(self.topic)
            for alarm in self.alarms:
                alarm.add_alarm_action(action)
                alarm.add_ok_action(action)

    def _alarm(self, found: CloudWatchGuardrail) -> cw.Alarm:
        return cw.Alarm(
            self,
            _construct_id(found.name),
            alarm_name=f"{self.config.project}-{found.name}",
            alarm_description=found.description,
            metric=cw.Metric(
                namespace=self.config.loadtest.metric_namespace,
                metric_name=found.metric,
                dimensions_map=dict(found.dimensions),
                statistic=found.statistic,
                period=cdk.Duration.seconds(found.period_s),
            ),
            threshold=found.threshold,
            comparison_operator=_COMPARISON[found.must_be],
            evaluation_periods=found.breaches_to_fail,
            treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
        )

    def _topic(self, email: str | None) -> sns.Topic:
        key = kms.Key(
            self,
            "TopicKey",
            description=f"{self.config.project}: encrypts the guardrail alarm topic",
            enable_key_rotation=True,
        )
        # CloudWatch publishes to an encrypted topic only if the key lets it (SNS developer
        # guide, "Enable compatibility between event sources from AWS services and encrypted
        # topics"); the conditions keep it to this account's guardrail alarms.
        stack = cdk.Stack.of(self)
        key.add_to_resource_policy(
            iam.PolicyStatement(
                principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
                actions=["kms:Decrypt", "kms:GenerateDataKey*"],
                resources=["*"],
                conditions={
                    "StringEquals": {"aws:SourceAccount": stack.account},
                    "ArnLike": {
                        "aws:SourceArn": stack.format_arn(
                            service="cloudwatch",
                            resource="alarm",
                            resource_name=f"{self.config.project}-*",
                            arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME,
                        )
                    },
                },
            )
        )
        topic = sns.Topic(
            self,
            "Topic",
            display_name=f"{self.config.project} guardrail alarms",
            master_key=key,
            enforce_ssl=True,
        )
        if email:
            topic.add_subscription(subscriptions.EmailSubscription(email))
        self.topic_key = key
        return topic
