"""CloudWatch dashboard: both arms side by side, by prompt class, cost per 1M output tokens,
the guardrail alarms (stacks/alarms.py) and Container Insights.

Metric names, namespace and dimensions come from ``config.loadtest`` (the contract with the
publisher in ``loadtest/``). Prompt classes are data-driven (prompt files), so graphs use
SEARCH expressions instead of a hard-coded list. Latencies are raw values in milliseconds, so
percentile statistics are meaningful.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_kms as kms
from constructs import Construct

from experiment import Arm, ExperimentConfig
from stacks.alarms import GuardrailAlarms
from stacks.guardrails import GuardrailWorkspace

PERIOD = cdk.Duration.minutes(1)
PERCENTILES = ("p50", "p90", "p99")
CONTAINER_INSIGHTS = "ContainerInsights"
WIDTH = 24  # dashboard grid width


class ObservabilityStack(cdk.Stack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: ExperimentConfig,
        logs_key: kms.IKey,
        **kwargs,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.config = config
        lt = config.loadtest
        names = lt.metric_names
        self.dashboard = cw.Dashboard(
            self,
            "Dashboard",
            dashboard_name=f"{config.project}-speculative-decoding",
            default_interval=cdk.Duration.hours(3),
        )
        labels = ", ".join(f"{lt.variant_labels[arm]} = {arm.value}" for arm in Arm)
        self.dashboard.add_widgets(
            cw.TextWidget(
                markdown=(
                    f"# {config.serving.baseline_service} vs {config.serving.speculative_service}"
                    f"\nSame load at both arms ({labels}); namespace `{lt.metric_namespace}`, "
                    f"dimensions `{lt.variant_dimension}` x `{lt.prompt_class_dimension}`. "
                    "Latencies in milliseconds; lower is better. Each line is one prompt class."
                ),
                width=WIDTH,
                height=2,
            )
        )
        latency_metrics = (
            ("Time to first token", names.ttft),
            ("Inter-token latency", names.inter_token_latency),
            ("End-to-end latency", names.e2e_latency),
        )
        for title, metric in latency_metrics:
            self.dashboard.add_widgets(
                *(
                    self._by_prompt_class(f"{title} {stat} (ms)", metric, stat, "ms")
                    for stat in PERCENTILES
                )
            )
        self.dashboard.add_widgets(
            self._by_prompt_class(
                "Output tokens/s per request (p50)",
                names.output_tokens_per_second,
                "p50",
                "tokens/s",
            ),
            self._by_prompt_class(
                "Output token throughput (run)", names.output_throughput, "Average", "tokens/s"
            ),
            self._by_prompt_class("Failed requests", names.failed_requests, "Sum", "count"),
        )
        guard = config.guardrails
        acceptance_bar = cw.HorizontalAnnotation(
            value=guard.min_acceptance_rate, label="guardrails.min_acceptance_rate"
        )
        # Acceptance has three sources (loadtest.results.AcceptanceSource): these graphs show
        # the measured one, the estimate graph below the client-side one, and a run whose
        # counters are frozen publishes neither, so a gap reads "not available", never 0.
        self.dashboard.add_widgets(
            self._by_variant(
                "Draft acceptance rate (measured: server counters)",
                names.acceptance_rate,
                "ratio",
                annotations=[acceptance_bar],
            ),
            self._by_variant(
                "Mean acceptance length (measured: server counters)",
                names.mean_acceptance_length,
                "tokens",
            ),
        )
        currency = config.pricing.currency
        self.dashboard.add_widgets(
            self._by_prompt_class(
                f"Cost per 1M output tokens ({currency}, each arm's share of its instance)",
                names.cost_per_million_output_tokens,
                "Average",
                currency,
            ),
            self._by_prompt_class(
                "SD acceptance estimate (client-side, servers without counters)",
                names.acceptance_rate_estimate,
                "Minimum",
                "ratio",
            ),
            self._by_prompt_class(
                "Failed request share", names.failed_request_share, "Maximum", "share"
            ),
        )
        self.dashboard.add_widgets(
            cw.GraphWidget(
                title="Lossless: SD output reproduced before its first divergence (share)",
                width=WIDTH,
                left=[
                    cw.Metric(
                        namespace=lt.metric_namespace,
                        metric_name=names.lossless_prefix_agreement,
                        dimensions_map={lt.variant_dimension: lt.variant_labels[Arm.SPECULATIVE]},
                        statistic="Minimum",
                        period=PERIOD,
                        label="prefix agreement",
                    )
                ],
                left_annotations=[
                    cw.HorizontalAnnotation(
                        value=guard.lossless_min_prefix_agreement,
                        label="guardrails.lossless_min_prefix_agreement",
                    )
                ],
                left_y_axis=cw.YAxisProps(min=0, max=1, show_units=False),
            )
        )
        self.guardrails = GuardrailAlarms(self, "Guardrails", config=config)
        self.dashboard.add_widgets(
            cw.AlarmStatusWidget(
                title="Guardrails (thresholds: config.guardrails)",
                alarms=self.guardrails.alarms,
                width=WIDTH,
            )
        )
        self.dashboard.add_widgets(*self._container_insights(config.cluster.name))
        # The live guardrails' workspace (None when guardrails.live is off); the collector
        # feeding it lives with the cluster (stacks/cluster.py).
        self.workspace: GuardrailWorkspace | None = None
        if config.guardrails.live.enabled:
            assert self.guardrails.topic and self.guardrails.topic_key  # created when live is on
            self.workspace = GuardrailWorkspace(
                self,
                "LiveGuardrails",
                config=config,
                topic=self.guardrails.topic,
                topic_key=self.guardrails.topic_key,
                logs_key=logs_key,
            )

    def _search(self, metric: str, stat: str, arm: Arm, dimensions: tuple[str, ...]) -> str:
        lt = self.config.loadtest
        schema = ",".join((lt.metric_namespace, *dimensions))
        query = (
            f'{{{schema}}} MetricName="{metric}" {lt.variant_dimension}="{lt.variant_labels[arm]}"'
        )
        return f"SEARCH('{query}', '{stat}', {PERIOD.to_seconds()})"

    def _by_prompt_class(self, title: str, metric: str, stat: str, unit: str) -> cw.GraphWidget:
        lt = self.config.loadtest
        dims = (lt.prompt_class_dimension, lt.variant_dimension)
        return cw.GraphWidget(
            title=title,
            width=WIDTH // 3,
            left=[
                cw.MathExpression(
                    expression=self._search(metric, stat, arm, dims),
                    label="",  # SEARCH labels each series with its dimension values
                    period=PERIOD,
                )
                for arm in Arm
            ],
            left_y_axis=cw.YAxisProps(label=unit, min=0, show_units=False),
        )

    def _by_variant(
        self,
        title: str,
        metric: str,
        unit: str,
        annotations: list[cw.HorizontalAnnotation] | None = None,
    ) -> cw.GraphWidget:
        # Acceptance comes from the server's /metrics and carries only the Variant dimension.
        lt = self.config.loadtest
        return cw.GraphWidget(
            title=title,
            width=WIDTH // 2,
            left_annotations=annotations,
            left=[
                cw.Metric(
                    namespace=lt.metric_namespace,
                    metric_name=metric,
                    dimensions_map={lt.variant_dimension: lt.variant_labels[arm]},
                    statistic="Average",
                    period=PERIOD,
                    label=lt.variant_labels[arm],
                )
                for arm in Arm
            ],
            left_y_axis=cw.YAxisProps(label=unit, min=0, show_units=False),
        )

    def _container_insights(self, cluster_name: str) -> list[cw.IWidget]:
        def node(metric: str, stat: str = "Average") -> cw.Metric:
            return cw.Metric(
                namespace=CONTAINER_INSIGHTS,
                metric_name=metric,
                dimensions_map={"ClusterName": cluster_name},
                statistic=stat,
                period=cdk.Duration.minutes(5),
            )

        def pods(metric: str) -> cw.MathExpression:
            serving = self.config.serving.namespace
            return cw.MathExpression(
                expression=(
                    f"SEARCH('{{{CONTAINER_INSIGHTS},ClusterName,Namespace,PodName}} "
                    f'MetricName="{metric}" ClusterName="{cluster_name}" '
                    f"Namespace=\"{serving}\"', 'Average', 300)"
                ),
                label="",
                period=cdk.Duration.minutes(5),
            )

        return [
            cw.GraphWidget(
                title="Nodes: CPU / memory utilization (%)",
                width=WIDTH // 3,
                left=[node("node_cpu_utilization"), node("node_memory_utilization")],
            ),
            cw.GraphWidget(
                title="Nodes: count and failures",
                width=WIDTH // 3,
                left=[node("cluster_node_count"), node("cluster_failed_node_count")],
            ),
            cw.GraphWidget(
                title=f"Pods in {self.config.serving.namespace}: CPU / memory (%)",
                width=WIDTH // 3,
                left=[pods("pod_cpu_utilization"), pods("pod_memory_utilization")],
            ),
        ]
