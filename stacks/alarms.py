"""Guardrail alarms: speculation stopped paying, requests fail, or SD changed the output.

Each alarm watches a metric the load test publishes (loadtest/cloudwatch.py); namespace,
metric names, dimension names and the Variant labels come from ``config.loadtest`` and the
thresholds from ``config.guardrails``, so publisher and alarm cannot drift apart
(tests/stacks/test_alarms.py publishes a run's metrics to moto and matches every alarm).

- acceptance below ``min_acceptance_rate``, from whichever source the run had
  (loadtest.results.AcceptanceSource): the server's counters (AcceptanceRate, {Variant}:
  vllm-neuron 1.x, vLLM V1), or, for servers without counters (the published fork), the
  client-side estimate of each prompt class (AcceptanceRateEstimate). CloudWatch alarms need
  concrete dimensions (no SEARCH), so the classes are those of the configured prompt files,
  read at synth time. A run publishes only the source it had; frozen counters (vllm-neuron
  0.2.x) publish neither, since "not available" is no 0.
- failed-request share above ``max_failed_request_share``, per arm.
- lossless: the SD arm's prefix agreement with the baseline at temperature 0 below
  ``lossless_min_prefix_agreement`` (a stated tolerance: greedy outputs on Neuron are not
  bit-exact, so a single late divergence must not fire it).

Missing data is "not breaching" (CloudWatch User Guide, "Configuring how CloudWatch alarms
treat missing data": notBreaching treats missing data points as within the threshold; CDK
``TreatMissingData.NOT_BREACHING``): a run publishes once, so no run means no alarm, and an
acceptance that is not available (nothing published) cannot fire one. With
``guardrails.alarm_email`` set, or the live guardrails on (their Alertmanager notifies the same
topic), every alarm (and its recovery) notifies a KMS-encrypted SNS topic; the e-mail
subscription exists only with an address.
"""

from __future__ import annotations

import json
from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from constructs import Construct

from experiment import Arm, ExperimentConfig
from experiment.loading import PROJECT_ROOT


def prompt_classes(config: ExperimentConfig) -> list[str]:
    """The prompt classes of the configured prompt files, sorted.

    Reads only the ``class`` of each JSONL line: stacks/ does not import loadtest/ (the
    load test validates the files; tests/stacks/test_alarms.py checks both agree)."""
    classes: set[str] = set()
    for name in config.loadtest.prompts.files:
        path = Path(name) if Path(name).is_absolute() else PROJECT_ROOT / name
        if not path.is_file():
            raise ValueError(
                f"loadtest.prompts.files: {name!r} does not exist; the guardrail alarms need "
                "the prompt classes it defines"
            )
        for line in path.read_text().splitlines():
            if line.strip():
                classes.add(str(json.loads(line)["class"]))
    return sorted(classes)


def _construct_id(text: str) -> str:
    return "".join(part.capitalize() for part in text.replace("-", "_").split("_") if part)


class GuardrailAlarms(Construct):
    """The guardrail alarms of ``config.guardrails`` (and their SNS topic when configured)."""

    def __init__(self, scope: Construct, construct_id: str, *, config: ExperimentConfig) -> None:
        super().__init__(scope, construct_id)
        lt = config.loadtest
        names = lt.metric_names
        guard = config.guardrails
        self.config = config
        self.period = cdk.Duration.minutes(guard.period_minutes)
        self.alarms: list[cw.Alarm] = []
        prefix = config.project
        sd = lt.variant_labels[Arm.SPECULATIVE]
        self._alarm(
            "AcceptanceMeasured",
            name=f"{prefix}-sd-acceptance-measured",
            description=(
                f"SD arm ({sd}): acceptance from the server's spec-decode counters below "
                f"guardrails.min_acceptance_rate {guard.min_acceptance_rate}; speculation may "
                "cost more than it saves. Published only when the counters moved (never for "
                "frozen counters)"
            ),
            metric=names.acceptance_rate,
            dimensions={lt.variant_dimension: sd},
            statistic="Minimum",
            threshold=guard.min_acceptance_rate,
            comparison=cw.ComparisonOperator.LESS_THAN_THRESHOLD,
        )
        for prompt_class in prompt_classes(config):
            self._alarm(
                f"Acceptance{_construct_id(prompt_class)}",
                name=f"{prefix}-sd-acceptance-{prompt_class}",
                description=(
                    f"SD arm ({sd}): client-side acceptance estimate of prompt class "
                    f"{prompt_class!r} (servers without spec-decode counters) below "
                    f"guardrails.min_acceptance_rate {guard.min_acceptance_rate}; "
                    "speculation may cost more than it saves for this class"
                ),
                metric=names.acceptance_rate_estimate,
                dimensions={lt.variant_dimension: sd, lt.prompt_class_dimension: prompt_class},
                statistic="Minimum",
                threshold=guard.min_acceptance_rate,
                comparison=cw.ComparisonOperator.LESS_THAN_THRESHOLD,
            )
        for arm in Arm:
            label = lt.variant_labels[arm]
            self._alarm(
                f"FailedShare{_construct_id(arm.value)}",
                name=f"{prefix}-failed-share-{arm.value}",
                description=(
                    f"{arm.value} arm ({label}): share of failed requests above "
                    f"guardrails.max_failed_request_share {guard.max_failed_request_share}"
                ),
                metric=names.failed_request_share,
                dimensions={lt.variant_dimension: label},
                statistic="Maximum",
                threshold=guard.max_failed_request_share,
                comparison=cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
            )
        self._alarm(
            "LosslessAgreement",
            name=f"{prefix}-lossless-agreement",
            description=(
                f"SD arm ({sd}) reproduced less than guardrails.lossless_min_prefix_agreement "
                f"({guard.lossless_min_prefix_agreement}) of the baseline's greedy output "
                "before diverging (temperature 0): see the run's report (lossless section: "
                "first divergence per prompt)"
            ),
            metric=names.lossless_prefix_agreement,
            dimensions={lt.variant_dimension: sd},
            statistic="Minimum",
            threshold=guard.lossless_min_prefix_agreement,
            comparison=cw.ComparisonOperator.LESS_THAN_THRESHOLD,
        )
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

    def _alarm(
        self,
        construct_id: str,
        *,
        name: str,
        description: str,
        metric: str,
        dimensions: dict[str, str],
        statistic: str,
        threshold: float,
        comparison: cw.ComparisonOperator,
    ) -> None:
        lt = self.config.loadtest
        alarm = cw.Alarm(
            self,
            construct_id,
            alarm_name=name,
            alarm_description=description,
            metric=cw.Metric(
                namespace=lt.metric_namespace,
                metric_name=metric,
                dimensions_map=dimensions,
                statistic=statistic,
                period=self.period,
            ),
            threshold=threshold,
            comparison_operator=comparison,
            evaluation_periods=self.config.guardrails.evaluation_periods,
            treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
        )
        self.alarms.append(alarm)

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
