"""``loadtest``: the Locust comparative load test and its CloudWatch metrics."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import Field, field_validator, model_validator

from experiment.config.base import Arm, Section, ServiceAccountName
from experiment.config.metric_names import MetricNames
from experiment.config.traffic import TrafficConfig


class ArmsMode(StrEnum):
    """How the two arms share the run's time (loadtest/arms.py)."""

    CONCURRENT = "concurrent"
    """Both arms at once from one start instant: for arms on separate hardware."""
    SEQUENTIAL = "sequential"
    """One arm whole, then the other: for arms that share the machine."""
    ALTERNATING = "alternating"
    """The arms take turns in blocks of the schedule, in ABBA order (ABC CBA for three), so a
    slow drift of a shared machine falls on every arm alike."""


class PromptSuiteConfig(Section):
    """The published experiment's load: 64 input tokens, 600 output, 4 concurrent."""

    files: list[str] = Field(
        default_factory=lambda: [
            "loadtest/prompts/structured.jsonl",
            "loadtest/prompts/open_ended.jsonl",
        ],
        description=(
            "JSONL prompt files, one prompt class per file, relative to the repository root."
        ),
    )


class SloConfig(Section):
    ttft_ms: float = Field(
        default=2000.0, description="Time-to-first-token objective of a good request, ms."
    )
    tpot_ms: float = Field(
        default=100.0, description="Time-per-output-token objective of a good request, ms."
    )
    e2e_ms: float = Field(
        default=60000.0, description="End-to-end latency objective of a good request, ms."
    )


class LoadTestPodConfig(Section):
    """Size of each in-cluster load-test pod (the master, and every worker). A Locust process
    is one gevent loop (one core at most; bench/README.md: ~0.15 core for 64 streams, ~0.4
    for 256), with concurrent arms (loadtest.arms_mode) the pod runs both arms' Locust
    processes at once, and the report's plotting needs the headroom of the limit."""

    cpu: Annotated[int, Field(ge=1)] = Field(
        default=1, description="CPU cores each load-test pod requests."
    )
    cpu_limit: Annotated[int, Field(ge=1)] = Field(
        default=2, description="CPU limit of each load-test pod; at least cpu."
    )
    memory_gib: Annotated[int, Field(ge=1)] = Field(
        default=1, description="Memory each load-test pod requests, GiB."
    )
    memory_limit_gib: Annotated[int, Field(ge=1)] = Field(
        default=2, description="Memory limit of each load-test pod, GiB; at least memory_gib."
    )
    tmp_gib: Annotated[int, Field(ge=1)] = Field(
        default=1, description="emptyDir mounted at /tmp (the root filesystem is read-only), GiB."
    )
    results_gib: Annotated[int, Field(ge=1)] = Field(
        default=2, description="emptyDir for records and reports, GiB."
    )

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
    metric_namespace: str = Field(
        default="SpecDecode/LoadTest",
        description=(
            "CloudWatch namespace the load test publishes to: 1-255 printable ASCII "
            "characters, not starting with ':' or 'AWS/'."
        ),
    )
    metric_names: MetricNames = Field(
        default_factory=MetricNames,
        description="CloudWatch metric names, shared by the publisher and the dashboard.",
    )
    variant_dimension: str = Field(
        default="Variant", description="CloudWatch dimension naming the arm."
    )
    prompt_class_dimension: str = Field(
        default="PromptClass", description="CloudWatch dimension naming the prompt class."
    )
    variant_labels: dict[Arm, str] = Field(
        default_factory=lambda: {Arm.BASELINE: "Base", Arm.SPECULATIVE: "SD"},
        description=(
            "Label of each arm in metrics and reports; names both baseline and speculative."
        ),
    )
    tiered_label: str = Field(
        default="Tiered",
        description=(
            "Label of the tiered arm (the gateway routing each class, driven with the same "
            "load when a tiered URL is given) in reports; differs from variant_labels."
        ),
        min_length=1,
    )
    drive_gateway: bool = Field(
        default=False,
        description=(
            "In the cluster, also drive the internal tiered gateway as a third arm, tiered, "
            "after the two serving arms (same plan, same arms_mode): the load-test Job passes "
            "--tiered with the gateway's Envoy Service; the cluster's twin of local.tiered. "
            "Off by default: it adds an arm's run on the trn2 nodes."
        ),
    )
    prompts: PromptSuiteConfig = Field(
        default_factory=PromptSuiteConfig, description="The prompt suite."
    )
    traffic: TrafficConfig = Field(
        default_factory=TrafficConfig,
        description="Replay of imported request logs (file null: the prompt suite).",
    )
    concurrency: Annotated[int, Field(ge=1)] = Field(
        default=4, description="Concurrent users (streams) per arm; at least workers."
    )
    request_rate: float | None = Field(
        default=None,
        description="Requests per second (open loop); null: closed loop at concurrency.",
    )
    requests_per_prompt: Annotated[int, Field(ge=1)] = Field(
        default=8, description="Measured requests per prompt and arm."
    )
    arms_mode: ArmsMode = Field(
        default=ArmsMode.CONCURRENT,
        description=(
            "concurrent: both arms at once, the same prompt released to both together "
            "(separate hardware: the cluster, two endpoints); sequential: one arm, then "
            "the other; alternating: the arms take turns in blocks of "
            "alternating_block_requests in ABBA order (arms sharing a machine: the local "
            "run's local.arms_mode)."
        ),
    )
    # Each block is a Locust process of its own (seconds of start-up on a busy machine):
    # smaller blocks follow a drift more closely and cost more start-ups.
    alternating_block_requests: Annotated[int, Field(ge=1)] = Field(
        default=8,
        description=(
            "Alternating arms: measured requests per block (one arm alone runs one block, "
            "then the arms take turns in ABBA order); at least concurrency."
        ),
    )
    warmup_requests: Annotated[int, Field(ge=0)] = Field(
        default=2, description="Unmeasured requests per arm before measuring."
    )
    max_tokens: Annotated[int, Field(ge=1)] = Field(
        default=600, description="Output tokens per request."
    )
    ignore_eos: bool = Field(
        default=True,
        description="Keep generating past end-of-sequence so every request yields max_tokens.",
    )
    # What vLLM's SamplingParams accepts (vllm/sampling_params.py, _verify_args, vLLM 0.32:
    # finite, 0 <= temperature <= 2); 0 is greedy, what the lossless check needs.
    temperature: Annotated[float, Field(ge=0, le=2, allow_inf_nan=False)] = Field(
        default=0.0,
        description="Sampling temperature, 0 to 2; 0 is greedy, which the lossless check needs.",
    )
    seed: int = Field(default=0, description="Seed of the request order and sampling.")
    request_timeout_s: Annotated[float, Field(gt=0)] = Field(
        default=300.0, description="Seconds one request may take before it fails."
    )
    max_duration_s: Annotated[float, Field(gt=0)] = Field(
        default=3600.0, description="Most seconds one measured run may take."
    )
    job_deadline_margin_s: Annotated[int, Field(ge=0)] = Field(
        default=300,
        description=(
            "Seconds added to max_duration_s for the in-cluster Job's deadline: room "
            "to write the report and publish metrics."
        ),
    )
    workers: Annotated[int, Field(ge=1, le=64)] = Field(
        default=1,
        description=(
            "Locust worker processes (pods in the cluster) per arm, 1-64; 1: one "
            "process, no master. bench/README.md measures the per-worker stream "
            "budget."
        ),
    )
    master_port: Annotated[int, Field(ge=1024, le=65535)] = Field(
        default=5557,
        description=(
            "Port of a distributed arm's Locust master (Locust's default 5557). Arms run "
            "one after the other (arms_mode sequential) share it; arms whose masters run at "
            "once take one port each from it upwards: baseline master_port, speculative "
            "master_port + 1, all within 65535 (the worker pods' Service and NetworkPolicy "
            "open each)."
        ),
    )
    workers_connect_timeout_s: Annotated[int, Field(ge=1, le=3600)] = Field(
        default=300,
        description=(
            "Seconds a distributed arm's master waits for its workers to connect "
            "(locust --expect-workers-max-wait), then the arm fails; 1-3600."
        ),
    )
    max_failure_share: Annotated[float, Field(ge=0, lt=1)] = Field(
        default=0.0,
        description=(
            "Exit non-zero when an arm's failed share of measured requests exceeds "
            "this (0: any failure) or it has no successful request; 0 to <1."
        ),
    )
    clock_skew_warning_ms: Annotated[float, Field(gt=0)] = Field(
        default=5.0,
        description=(
            "Warn when the workers' wall clocks disagree by more than this, ms "
            "(window and throughput combine their times)."
        ),
    )
    wait_ready_s: Annotated[int, Field(ge=0)] = Field(
        default=14400,
        description=(
            "In the cluster, seconds to wait for both services' /health before "
            "measuring (a first deploy compiles for hours); part of the Job's "
            "deadline."
        ),
    )
    # After SIGTERM (the Job's deadline): room to stop the load, write the partial report and
    # publish it before Kubernetes kills the pod (summarizing 10k requests takes ~20 s,
    # bench/stats_speed.json).
    termination_grace_s: Annotated[int, Field(ge=30)] = Field(
        default=120,
        description=(
            "Seconds after SIGTERM to stop the load, write the partial report and "
            "publish it; 30 or more."
        ),
    )
    slo: SloConfig = Field(
        default_factory=SloConfig, description="Latency objectives that define goodput."
    )
    service_account: ServiceAccountName = Field(
        default="loadtest", description="Kubernetes service account of the load-test Job."
    )
    pod: LoadTestPodConfig = Field(
        default_factory=LoadTestPodConfig, description="Size of each in-cluster load-test pod."
    )
    image_directory: str = Field(
        default="loadtest",
        description="Directory with the load-test image's Dockerfile (a CDK image asset).",
    )

    @model_validator(mode="after")
    def _labels_name_both_arms(self) -> LoadTestConfig:
        if set(self.variant_labels) != set(Arm):
            raise ValueError("loadtest.variant_labels must name both arms: baseline, speculative")
        return self

    @model_validator(mode="after")
    def _tiered_label_is_its_own(self) -> LoadTestConfig:
        # The report tells the arms apart by their labels.
        if self.tiered_label in self.variant_labels.values():
            raise ValueError(
                f"loadtest.tiered_label {self.tiered_label!r} is also a serving arm's label in "
                "loadtest.variant_labels; choose another, such as 'Tiered'"
            )
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

    @model_validator(mode="after")
    def _master_ports_in_range(self) -> LoadTestConfig:
        last = self.master_port_of(list(Arm)[-1])
        if last > 65535:
            raise ValueError(
                f"loadtest.master_port ({self.master_port}) leaves no room for one Locust master "
                f"port per arm ({len(Arm)} arms at once, up to {last}): set loadtest.master_port "
                f"to at most {65536 - len(Arm)}"
            )
        return self

    def master_port_of(self, arm: Arm) -> int:
        """The port ``arm``'s Locust master listens on and its workers connect to: the one
        source for the runner (loadtest/runner.py) and the worker pods' Jobs, Service and
        NetworkPolicy (charts/). Masters that run at the same time each need their own; arms
        in turn (sequential, alternating) reuse one."""
        if self.arms_mode is not ArmsMode.CONCURRENT:
            return self.master_port
        return self.master_port + list(Arm).index(arm)

    @model_validator(mode="after")
    def _alternating_arms_without_worker_pods(self) -> LoadTestConfig:
        # A worker pod serves one master per arm for the whole run (loadtest/worker_pod.py),
        # not one master per block.
        if self.arms_mode is ArmsMode.ALTERNATING and self.workers > 1:
            raise ValueError(
                f"loadtest.arms_mode alternating runs one arm at a time in blocks, without "
                f"worker pods, but loadtest.workers is {self.workers}: set loadtest.workers=1, "
                "or loadtest.arms_mode=concurrent or sequential"
            )
        return self

    @model_validator(mode="after")
    def _alternating_blocks_fill_the_users(self) -> LoadTestConfig:
        # A block smaller than the users leaves some of them idle: the arm would be measured
        # at a lower concurrency than configured.
        if (
            self.arms_mode is ArmsMode.ALTERNATING
            and self.alternating_block_requests < self.concurrency
        ):
            raise ValueError(
                f"loadtest.alternating_block_requests ({self.alternating_block_requests}) is "
                f"below loadtest.concurrency ({self.concurrency}): a block would leave users "
                "idle; raise alternating_block_requests to at least the concurrency"
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
