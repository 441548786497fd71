"""``loadtest``: the Locust comparative load test and its CloudWatch metrics."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator, model_validator

from experiment.config.base import Arm, Section, ServiceAccountName


class PromptSuiteConfig(Section):
    """The published experiment's load: 64 input tokens, 600 output, 4 concurrent."""

    files: list[str] = Field(
        default_factory=lambda: [
            "loadtest/prompts/structured.jsonl",
            "loadtest/prompts/open_ended.jsonl",
        ]
    )


class SloConfig(Section):
    ttft_ms: float = 2000.0
    tpot_ms: float = 100.0
    e2e_ms: float = 60000.0


class MetricNames(Section):
    """CloudWatch metric names: the contract between the load test (publisher) and the
    dashboard (reader). Latencies in milliseconds."""

    ttft: str = "TimeToFirstToken"
    inter_token_latency: str = "InterTokenLatency"  # per token, not per SSE chunk
    time_per_output_token: str = "TimePerOutputToken"
    e2e_latency: str = "EndToEndLatency"
    output_tokens_per_second: str = "OutputTokensPerSecond"  # per request
    output_throughput: str = "OutputTokenThroughput"  # per run: tokens / wall second
    request_throughput: str = "RequestThroughput"
    goodput: str = "Goodput"
    failed_requests: str = "FailedRequests"
    acceptance_rate: str = "AcceptanceRate"
    mean_acceptance_length: str = "MeanAcceptanceLength"
    # SD arm per prompt class, from client-side tokens per chunk (loadtest/stats.py)
    acceptance_rate_estimate: str = "AcceptanceRateEstimate"
    failed_request_share: str = "FailedRequestShare"  # failed / sent, 0..1
    lossless_mismatches: str = "LosslessMismatches"  # per run, no Variant dimension
    cost_per_million_output_tokens: str = "CostPerMillionOutputTokens"  # USD


class LoadTestPodConfig(Section):
    """Size of each in-cluster load-test pod (the master, and every worker). A Locust process
    is one gevent loop (one core at most; bench/README.md: ~0.15 core for 64 streams, ~0.4
    for 256), the arms run one after the other, and the report's plotting needs the headroom
    of the limit."""

    cpu: Annotated[int, Field(ge=1)] = 1
    cpu_limit: Annotated[int, Field(ge=1)] = 2
    memory_gib: Annotated[int, Field(ge=1)] = 1
    memory_limit_gib: Annotated[int, Field(ge=1)] = 2
    tmp_gib: Annotated[int, Field(ge=1)] = 1  # emptyDir /tmp (read-only root filesystem)
    results_gib: Annotated[int, Field(ge=1)] = 2  # emptyDir for records and reports

    @model_validator(mode="after")
    def _requests_within_limits(self) -> LoadTestPodConfig:
        for request, limit in (("cpu", "cpu_limit"), ("memory_gib", "memory_limit_gib")):
            if getattr(self, request) > getattr(self, limit):
                raise ValueError(
                    f"loadtest.pod.{request} ({getattr(self, request)}) exceeds "
                    f"loadtest.pod.{limit} ({getattr(self, limit)}): raise the limit or "
                    "lower the request"
                )
        return self


class LoadTestConfig(Section):
    metric_namespace: str = "SpecDecode/LoadTest"
    metric_names: MetricNames = Field(default_factory=MetricNames)
    variant_dimension: str = "Variant"
    prompt_class_dimension: str = "PromptClass"
    variant_labels: dict[Arm, str] = Field(
        default_factory=lambda: {Arm.BASELINE: "Base", Arm.SPECULATIVE: "SD"}
    )
    prompts: PromptSuiteConfig = Field(default_factory=PromptSuiteConfig)
    concurrency: Annotated[int, Field(ge=1)] = 4
    request_rate: float | None = None  # requests/s (open loop); None: closed loop at concurrency
    requests_per_prompt: Annotated[int, Field(ge=1)] = 8
    warmup_requests: Annotated[int, Field(ge=0)] = 2
    max_tokens: Annotated[int, Field(ge=1)] = 600
    ignore_eos: bool = True
    # What vLLM's SamplingParams accepts (vllm/sampling_params.py, _verify_args, vLLM 0.32:
    # finite, 0 <= temperature <= 2); 0 is greedy, what the lossless check needs.
    temperature: Annotated[float, Field(ge=0, le=2, allow_inf_nan=False)] = 0.0
    seed: int = 0
    request_timeout_s: Annotated[float, Field(gt=0)] = 300.0
    max_duration_s: Annotated[float, Field(gt=0)] = 3600.0
    # The in-cluster Job's deadline is max_duration_s plus this: room to write the report
    # and publish metrics after the measured window ends.
    job_deadline_margin_s: Annotated[int, Field(ge=0)] = 300
    # Locust worker processes (pods in the cluster) per arm; 1: one process, no master.
    # The per-worker stream budget is measured in bench/README.md ("Workers").
    workers: Annotated[int, Field(ge=1, le=64)] = 1
    master_port: Annotated[int, Field(ge=1024, le=65535)] = 5557  # Locust's default
    # A distributed arm's Locust master waits at most this long for its workers to connect
    # (locust --expect-workers-max-wait), then the arm fails. Worker pods may first wait for
    # a node and an image pull; each arm waits once and the Job's deadline includes both.
    workers_connect_timeout_s: Annotated[int, Field(ge=1, le=3600)] = 300
    # Exit non-zero when an arm's failed share of measured requests exceeds this (0: any
    # failure, like Locust's --exit-code-on-error) or when it has no successful request.
    max_failure_share: Annotated[float, Field(ge=0, lt=1)] = 0.0
    # Warn when the workers' wall clocks disagree by more than this (window and throughput
    # combine their wall-clock times).
    clock_skew_warning_ms: Annotated[float, Field(gt=0)] = 5.0
    # In the cluster, wait at most this long for both services' /health before measuring
    # (first deploy compiles for hours); part of the Job's deadline.
    wait_ready_s: Annotated[int, Field(ge=0)] = 14400
    # After SIGTERM (the Job's deadline): room to stop the load, write the partial report and
    # publish it before Kubernetes kills the pod (summarizing 10k requests takes ~20 s,
    # bench/stats_speed.json).
    termination_grace_s: Annotated[int, Field(ge=30)] = 120
    slo: SloConfig = Field(default_factory=SloConfig)
    service_account: ServiceAccountName = "loadtest"
    pod: LoadTestPodConfig = Field(default_factory=LoadTestPodConfig)
    image_directory: str = "loadtest"  # Dockerfile for the load-test image (CDK image asset)

    @model_validator(mode="after")
    def _labels(self) -> LoadTestConfig:
        if set(self.variant_labels) != set(Arm):
            raise ValueError("loadtest.variant_labels must name both arms: baseline, speculative")
        return self

    @model_validator(mode="after")
    def _workers_have_users(self) -> LoadTestConfig:
        # Locust spreads the users over the workers; a worker without one would never run
        # its share of the schedule.
        if self.workers > self.concurrency:
            raise ValueError(
                f"loadtest.workers ({self.workers}) exceeds loadtest.concurrency "
                f"({self.concurrency}): every worker needs at least one user; lower workers"
            )
        return self

    @field_validator("metric_namespace")
    @classmethod
    def _cloudwatch_namespace(cls, value: str) -> str:
        # PutMetricData's Namespace (botocore cloudwatch service-2.json): 1-255 ASCII characters,
        # not starting with ':', no control characters, and not 'AWS/' (AWS services' own).
        if (
            not 1 <= len(value) <= 255
            or value.startswith((":", "AWS/"))
            or not value.isascii()
            or not value.isprintable()
        ):
            raise ValueError(
                f"{value!r} is not a CloudWatch namespace you can publish to: use 1-255 printable "
                "ASCII characters, not starting with ':' or 'AWS/', e.g. 'SpecDecode/LoadTest'"
            )
        return value
