"""The whole configuration (every section) and the serving specs built from it."""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from experiment.config import upstreams as calendar_table
from experiment.config.base import EKS_APP, Arm, Section, apply_rule, error_at
from experiment.config.cluster import ClusterConfig
from experiment.config.cross_section import cross_section_problems
from experiment.config.deploy_pins import PIN_ERROR, PIN_NOTES, pin_problems
from experiment.config.guardrails import GuardrailConfig
from experiment.config.loadtest import LoadTestConfig
from experiment.config.local import LocalConfig
from experiment.config.model_store import ModelStoreConfig
from experiment.config.network import NetworkConfig
from experiment.config.pricing import PricingConfig
from experiment.config.profiles import PROFILES, ServingProfile
from experiment.config.routing import RoutingConfig
from experiment.config.serving import ServingConfig
from experiment.config.stats import StatisticsConfig
from experiment.config.tuning import TuningConfig
from experiment.config.upstreams import UpstreamsConfig
from experiment.instance_regions import regions_offering
from runtime import validate as rules
from runtime.spec import Generation, ServingSpec

# local.drafter -> vLLM's speculative method (vllm 0.32 vllm/config/speculative.py).
LOCAL_METHODS = {"draft-model": "draft_model", "eagle3": "eagle3"}


class ExperimentConfig(Section):
    project: str = Field(
        default="qwen-sd", description="Project name: prefix of stack names and tags."
    )
    region: str = Field(
        default="us-east-2",
        description="AWS region, such as 'us-east-2'; it must offer the Neuron instance type.",
    )
    account: str | None = Field(
        default=None, description="12-digit AWS account id; null: environment-agnostic synth."
    )
    network: NetworkConfig = Field(default_factory=NetworkConfig, description="The VPC.")
    model_store: ModelStoreConfig = Field(
        default_factory=ModelStoreConfig,
        description="The S3 bucket of checkpoints and compiled artifacts.",
    )
    cluster: ClusterConfig = Field(
        default_factory=ClusterConfig, description="The EKS cluster and its node groups."
    )
    serving: ServingConfig = Field(
        default_factory=ServingConfig,
        description="Both vLLM services and the speculative settings.",
    )
    loadtest: LoadTestConfig = Field(
        default_factory=LoadTestConfig, description="The comparative load test."
    )
    local: LocalConfig = Field(
        default_factory=LocalConfig,
        description="The local run on vLLM CPU with tiny generated models.",
    )
    pricing: PricingConfig = Field(
        default_factory=PricingConfig, description="Prices for the cost per 1M output tokens."
    )
    guardrails: GuardrailConfig = Field(
        default_factory=GuardrailConfig, description="Alarm thresholds."
    )
    statistics: StatisticsConfig = Field(
        default_factory=StatisticsConfig, description="The paired bootstrap of every ratio."
    )
    tuning: TuningConfig = Field(default_factory=TuningConfig, description="The (draft, k) sweeps.")
    routing: RoutingConfig = Field(
        default_factory=RoutingConfig,
        description="Prompt classes sent to the speculative arm by header, and the fallback.",
    )
    upstreams: UpstreamsConfig = Field(
        default_factory=UpstreamsConfig,
        description="How cdk synth reads the support calendar of pinned upstreams.",
    )

    @model_validator(mode="before")
    @classmethod
    def _profile_tuning_defaults(cls, data: Any) -> Any:
        # The trn2 plan follows the serving profile (which drafts, which k) unless the tuning
        # section names its own.
        if not isinstance(data, dict):
            return data
        serving, tuning = data.get("serving", {}), data.get("tuning", {})
        if not isinstance(tuning, dict):
            return data
        given = serving.get("profile") if isinstance(serving, dict) else serving.profile
        try:
            profile = ServingProfile(given or ServingProfile.REPRODUCE)
        except ValueError:
            return data  # serving.profile's own validation names the allowed values
        return {**data, "tuning": {**PROFILES[profile].tuning_defaults(), **tuning}}

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
            raise error_at(
                ("region",),
                f"region {self.region!r} does not offer {instance_type} (cfn-lint's "
                f"instance-type data, experiment/instance_regions.py); use one of "
                f"{list(regions)} and AZs there, or another Neuron instance type",
            )
        return self

    @model_validator(mode="after")
    def _azs_in_region(self) -> ExperimentConfig:
        for az in self.network.availability_zones:
            if not az.startswith(self.region):
                raise ValueError(
                    f"network.availability_zones: {az!r} is not in region {self.region!r}"
                )
        return self

    @model_validator(mode="after")
    def _operators_are_not_admins(self) -> ExperimentConfig:
        # EKS allows one access entry per principal; an admin may abort and retry already.
        both = set(self.routing.eks.operator_principal_arns) & set(
            self.cluster.admin_principal_arns
        )
        if both:
            raise ValueError(
                f"routing.eks.operator_principal_arns {sorted(both)} are also in "
                "cluster.admin_principal_arns; remove them from one of the two"
            )
        return self

    @model_validator(mode="after")
    def _deploy_pins(self, info: ValidationInfo) -> ExperimentConfig:
        # Every deploy pin (the plugin digest, the two add-on versions, a hub commit per
        # imported checkpoint) is checked here at once, so one synth names all that are malformed
        # or, for the CDK app and the kubectl path (EKS_APP), missing: one error, whose hint
        # (experiment/loading.py) is `make pins`. A pin's note (PIN_NOTES) says why the pin
        # recorded in cdk.context.json does not apply (another cluster version, another hub).
        context = info.context or {}
        problems = pin_problems(self, bool(context.get(EKS_APP)), context.get(PIN_NOTES) or {})
        if problems:
            raise ValidationError.from_exception_data(
                "ExperimentConfig",
                [
                    InitErrorDetails(
                        type=PydanticCustomError(PIN_ERROR, "{message}", {"message": message}),
                        loc=tuple(key.split(".")),
                        input=None,
                    )
                    for key, message in problems
                ],
            )
        return self

    def hub_models(self) -> list[str]:
        """The hub ids the model import Job pulls, each once: target, draft, then the tuning
        drafts deployed as arms."""
        models = [self.serving.target_model, self.serving.draft_model]
        if self.tuning.deploy:
            models += self.tuning.drafts
        return list(dict.fromkeys(models))

    @model_validator(mode="after")
    def _eks_app_is_in_support(self, info: ValidationInfo) -> ExperimentConfig:
        # The support calendar (experiment/config/upstreams.py): a pin past its end stops synth
        # unless acknowledged by name; warnings are printed by the CDK app (stacks/app.py).
        if not (info.context or {}).get(EKS_APP):
            return self
        findings = self.calendar()
        if findings.refusals:
            raise error_at(("upstreams", "acknowledge"), "; ".join(findings.refusals))
        return self

    def calendar(self) -> calendar_table.Findings:
        """The support calendar's findings for this configuration, on the calendar's today."""
        return calendar_table.check(
            calendar_table.rows_for(self),
            self.upstreams.on(),
            self.upstreams.warn_days,
            self.upstreams.acknowledge,
        )

    @model_validator(mode="after")
    def _reservation_az_is_a_network_az(self) -> ExperimentConfig:
        nodes = self.cluster.neuron_nodes
        if nodes.availability_zone and (
            nodes.availability_zone not in self.network.availability_zones
        ):
            raise ValueError(
                f"cluster.neuron_nodes.availability_zone {nodes.availability_zone!r} is not one "
                f"of network.availability_zones {self.network.availability_zones}; add it there "
                "or set the AZ your Capacity Block or reservation is in"
            )
        return self

    @model_validator(mode="after")
    def _analysis_window_holds_the_alarm_periods(self) -> ExperimentConfig:
        """With live guardrails off the analysis fails on evaluation_periods breaching
        datapoints of the window it looks back on (guardrails/cloudwatch.py): a
        shorter window could never fail."""
        window = self.routing.eks.analysis_window_periods
        periods = self.guardrails.evaluation_periods
        if not self.guardrails.live.enabled and window < periods:
            raise ValueError(
                f"routing.eks.analysis_window_periods {window} is shorter than "
                f"guardrails.evaluation_periods {periods}: the rollback analysis could never "
                f"see that many breaching periods; set it to at least {periods}"
            )
        return self

    @model_validator(mode="after")
    def _claim_fits_the_instance(self) -> ExperimentConfig:
        nodes = self.cluster.neuron_nodes
        serving = self.serving
        if serving.neuron_devices > nodes.devices:
            raise ValueError(
                f"serving.neuron_devices {serving.neuron_devices} exceeds the "
                f"{nodes.devices} devices of a {nodes.instance_type}"
            )
        return self

    @model_validator(mode="after")
    def _tensor_parallelism_fits_the_claim(self) -> ExperimentConfig:
        serving, nodes = self.serving, self.cluster.neuron_nodes
        claim = (
            f"of the claim ({serving.neuron_devices} devices x "
            f"{nodes.physical_cores_per_device} physical cores / LNC "
            f"{serving.logical_neuron_cores}; serving.neuron_devices)"
        )
        apply_rule(
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

    @model_validator(mode="after")
    def _sections_agree(self) -> ExperimentConfig:
        for loc, problem in cross_section_problems(self):
            raise error_at(loc, problem)
        return self

    @model_validator(mode="after")
    def _schedule_fits_the_local_arm(self, info: ValidationInfo) -> ExperimentConfig:
        # serving.speculation_schedule outside the CDK app: the local arm serves it, with its
        # own k and batch (the CDK app checks the trn2 arms': ServingConfig).
        schedule, local = self.serving.speculation_schedule, self.local
        if schedule is None or (info.context or {}).get(EKS_APP):
            return self
        k = local.num_speculative_tokens or self.serving.num_speculative_tokens
        k_key = (
            "local.num_speculative_tokens"
            if local.num_speculative_tokens
            else "serving.num_speculative_tokens"
        )
        keys = {"num_speculative_tokens": k_key, "max_num_seqs": "local.max_num_seqs"}
        try:
            rules.check_speculation_schedule(
                Generation.LOCAL_CPU,
                schedule,
                k,
                local.max_num_seqs,
                lambda field: keys.get(field, f"serving.{field}"),
            )
        except rules.SpecError as err:
            raise error_at(("serving", "speculation_schedule"), str(err)) from None
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

    def deployed_candidates(self) -> list[tuple[str, int]]:
        """The tuning candidates (draft, k) deployed beside the arms with ``tuning.deploy``;
        the comparison's own speculative arm is not repeated (it is that candidate already)."""
        if not self.tuning.deploy:
            return []
        own = (self.serving.draft_model, self.serving.num_speculative_tokens)
        pairs = [(d, k) for d in self.tuning.drafts for k in self.tuning.measured_k]
        return [pair for pair in pairs if pair != own]

    def neuron_nodes_for_arms(self) -> int:
        """Neuron nodes that hold every serving pod at once: both arms and the deployed
        candidates, ``serving.replicas`` pods each, as many per node as its devices allow."""
        per_node = self.cluster.neuron_nodes.devices // self.serving.neuron_devices
        pods = (2 + len(self.deployed_candidates())) * self.serving.replicas
        return -(-pods // per_node)

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
            speculation_schedule=self._schedule() if speculative else None,
            tensor_parallel_size=serving.tensor_parallel_size,
            logical_neuron_cores=serving.logical_neuron_cores,
            claimed_logical_cores=self.claimed_logical_cores,
            compiled_artifacts_path=self.compiled_artifacts_path(arm),
            compiled_max_model_len=serving.compiled_max_model_len or serving.max_model_len,
            prefix_caching=serving.prefix_caching,
            chunked_prefill=serving.chunked_prefill,
            all_greedy=self.loadtest.temperature == 0,
        )

    def _schedule(self) -> tuple[tuple[int, int, int], ...] | None:
        schedule = self.serving.speculation_schedule
        return None if schedule is None else tuple(schedule)

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
            speculative_method=LOCAL_METHODS[local.drafter] if speculative else None,
            speculation_schedule=self._schedule() if speculative else None,
            host=local.host,
            cpu_kvcache_gib=local.cpu_kvcache_gib,
            dtype=local.dtype,
            extra_args=tuple(local.server_args),
        )
