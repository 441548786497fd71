"""``loadtest.metric_names``: the CloudWatch metric names the load test publishes and the
dashboard, alarms and guardrail analysis read."""

from __future__ import annotations

from pydantic import Field

from experiment.config.base import Section


class MetricNames(Section):
    """CloudWatch metric names: the contract between the load test (publisher) and the
    dashboard (reader). Latencies in milliseconds."""

    ttft: str = Field(default="TimeToFirstToken", description="Time to first token, ms.")
    inter_token_latency: str = Field(
        default="InterTokenLatency", description="Latency per token (not per SSE chunk), ms."
    )
    time_per_output_token: str = Field(
        default="TimePerOutputToken", description="Time per output token after the first, ms."
    )
    e2e_latency: str = Field(
        default="EndToEndLatency", description="End-to-end latency of a request, ms."
    )
    output_tokens_per_second: str = Field(
        default="OutputTokensPerSecond", description="Output tokens per second of one request."
    )
    output_throughput: str = Field(
        default="OutputTokenThroughput", description="Output tokens per wall-clock second of a run."
    )
    request_throughput: str = Field(
        default="RequestThroughput", description="Requests per second of a run."
    )
    goodput: str = Field(default="Goodput", description="Requests per second that met every SLO.")
    failed_requests: str = Field(default="FailedRequests", description="Failed requests of a run.")
    acceptance_rate: str = Field(
        default="AcceptanceRate",
        description="Draft tokens accepted / proposed, from the server's metrics.",
    )
    mean_acceptance_length: str = Field(
        default="MeanAcceptanceLength", description="Mean tokens accepted per speculative step."
    )
    acceptance_rate_estimate: str = Field(
        default="AcceptanceRateEstimate",
        description=(
            "SD arm, per prompt class: acceptance estimated from client-side tokens "
            "per chunk (loadtest/stats.py)."
        ),
    )
    failed_request_share: str = Field(
        default="FailedRequestShare", description="Failed / sent requests, 0..1."
    )
    lossless_mismatches: str = Field(
        default="LosslessMismatches",
        description=(
            "Prompts whose SD output differs from the baseline's, per run (published with "
            "Variant=SD)."
        ),
    )
    lossless_prefix_agreement: str = Field(
        default="LosslessPrefixAgreement",
        description=(
            "Tokens before each prompt's first divergence from the baseline / tokens compared,"
            " per run, Variant=SD (the lossless alarm watches it)."
        ),
    )
    cost_per_million_output_tokens: str = Field(
        default="CostPerMillionOutputTokens", description="Cost per 1M output tokens, USD."
    )
