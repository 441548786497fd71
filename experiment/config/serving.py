"""``serving``: what both vLLM services share, and the speculative arm's settings."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from experiment.config.base import (
    EKS_APP,
    Arm,
    NamespaceName,
    Section,
    ServiceName,
    apply_rule,
    error_at,
)
from experiment.config.cluster import CONNECTED_DEVICE_GROUP_SIZES
from experiment.config.models import image_problem, serving_problems
from experiment.config.profiles import FORK_IMAGE, PLUGIN_IMAGE, PROFILES, ServingProfile
from runtime import validate as rules
from runtime.spec import Generation


class SecurityProfile(StrEnum):
    """The vLLM pods' security context (docs/serving.md, first-deploy checklist)."""

    STRICT = "strict"  # all capabilities dropped, no privilege escalation, RuntimeDefault seccomp
    SAMPLE = "sample"  # none set, as the experiment's sample does (runtime defaults apply)


class ServingConfig(Section):
    """What both vLLM services share, plus the speculative settings of the SD arm."""

    namespace: NamespaceName = Field(
        default="qwen", description="Kubernetes namespace of both vLLM services and the load test."
    )
    baseline_service: ServiceName = Field(
        default="qwen-vllm",
        description=(
            "Service name of the baseline arm (the Rollout's stable Service); differs from "
            "speculative_service."
        ),
    )
    speculative_service: ServiceName = Field(
        default="qwen-sd-vllm",
        description="Service name of the speculative-decoding arm (the Rollout's canary Service).",
    )
    profile: ServingProfile = Field(
        default=ServingProfile.REPRODUCE,
        description=(
            "The one choice of serving stack. reproduce: the published experiment (vLLM "
            "0.9.1 NxD Inference fork, fused plain-draft speculation, frozen, acceptance "
            "estimated client-side). new-deployment: vllm-neuron 1.x with the EAGLE3 drafter "
            "RedHatAI/Qwen3-32B-speculator.eagle3 (EAGLE3 is supported for Qwen3 on vllm-neuron; "
            "whether this speculators-format drafter loads there is not yet run), k "
            "re-tuned in 3-7, real acceptance counters. Sets image, draft_model, "
            "speculative_method, num_speculative_tokens and the trn2 tuning sweep "
            "(experiment/config/profiles.py); a value set explicitly wins."
        ),
    )
    # Defaults below are the reproduce profile's; new-deployment's come in _profile_defaults.
    image: str = Field(
        default=FORK_IMAGE,
        description=(
            "Container image of both vLLM services; default: the profile's DLC (reproduce: "
            "the fork's SDK 2.26.1 DLC; new-deployment: the SDK 2.33 vllm-neuron 1.2 DLC)."
        ),
    )
    target_model: str = Field(
        default="Qwen/Qwen3-32B",
        description=(
            "Hugging Face id of the target model; its checkpoint sits under "
            "model_store.checkpoints_prefix."
        ),
    )
    draft_model: str = Field(
        default="Qwen/Qwen3-1.7B",
        description=(
            "Hugging Face id of the draft model of the speculative arm; not the "
            "target. new-deployment defaults to an EAGLE3 speculator."
        ),
    )
    speculative_method: str | None = Field(
        default=None,
        description=(
            "vLLM speculative method; null: the fork's 'eagle' (reproduce). "
            "new-deployment: 'eagle3' (default) or 'dflash' (vllm-neuron 1.x takes no other)."
        ),
    )
    num_speculative_tokens: int = Field(
        default=7,
        description=(
            "k, the tokens the draft proposes per step (runtime/validate.py gives the range); "
            "default: the profile's (reproduce 7, new-deployment 5, to re-tune in 3-7)."
        ),
    )
    speculation_schedule: list[tuple[int, int, int]] | None = Field(
        default=None,
        description=(
            "A k per batch-size range, [[first, last, k], ...] inclusive, k=0 no speculation "
            "(vLLM's num_speculative_tokens_per_batch_size, Dynamic SD); null: one k "
            "(num_speculative_tokens) at every load. Ranges from 1, sorted, without gaps or "
            "overlaps, up to at most max_num_seqs; each k at most num_speculative_tokens (the "
            "drafter's maximum); one range with k >= 1. Served by the local CPU profile only: "
            "cdk synth refuses it on the 0.9 fork and on vllm-neuron 1.x (runtime/validate.py "
            "says why). `python -m tune` derives one."
        ),
    )
    prefix_caching: bool = Field(
        default=False,
        description=(
            "vLLM prefix caching, set the same on both arms. Off: the published arms ran "
            "without it (the fork's V0 engine), while vllm-neuron 1.x turns it on unless told; "
            "on only with new-deployment and a method that allows it (not dflash)."
        ),
    )
    dflash_block_size: Annotated[int, Field(ge=2)] | None = Field(
        default=None,
        description=(
            "speculative_method 'dflash' only: the drafter's trained proposal block size "
            "(block_size in its config.json); num_speculative_tokens must equal it minus 1."
        ),
    )
    tensor_parallel_size: Annotated[int, Field(ge=1)] = Field(
        default=32,
        description=(
            "Tensor-parallel degree of each arm; must fit the logical cores the pod claims."
        ),
    )
    logical_neuron_cores: Literal[1, 2] = Field(
        default=2,
        description="Logical NeuronCore size (LNC): 1 or 2 physical cores per logical core.",
    )
    neuron_devices: int = Field(
        default=8,
        description=(
            "Neuron devices (chips) one pod claims through DRA: 1, 4, 8 or 16, at "
            "most the instance's."
        ),
    )
    max_num_seqs: Annotated[int, Field(ge=1)] = Field(
        default=4, description="Most sequences vLLM batches at once; 1 or more."
    )
    max_model_len: Annotated[int, Field(ge=16)] = Field(
        default=1024, description="Longest sequence (prompt plus output) in tokens; 16 or more."
    )
    compiled_max_model_len: int | None = Field(
        default=None,
        description="Sequence length the Neuron artifacts were compiled for; null: max_model_len.",
    )
    block_size: Annotated[int, Field(ge=1)] = Field(
        default=32, description="KV-cache block size in tokens; 1 or more."
    )
    port: Annotated[int, Field(ge=1024, le=65535)] = Field(
        default=8000, description="HTTP port of both vLLM services; 1024-65535."
    )
    replicas: Annotated[int, Field(ge=1)] = Field(default=1, description="Pods per arm; 1 or more.")
    cpu: Annotated[int, Field(ge=1)] = Field(
        default=90, description="CPU cores each vLLM pod requests."
    )
    memory_gib: Annotated[int, Field(ge=1)] = Field(
        default=512, description="Memory each vLLM pod requests, GiB."
    )
    shm_size_gib: Annotated[int, Field(ge=1)] = Field(
        default=128, description="Shared memory (/dev/shm) of each vLLM pod, GiB."
    )
    startup_timeout_minutes: Annotated[int, Field(ge=1)] = Field(
        default=60,
        description="Minutes a pod may take to become ready when it loads precompiled artifacts.",
    )
    precompile_timeout_minutes: Annotated[int, Field(ge=1)] = Field(
        default=360, description="Minutes the first compile of target and draft may take."
    )
    compile_scratch_gib: Annotated[int, Field(ge=1)] = Field(
        default=256, description="Node-local disk vLLM compiles into, GiB."
    )
    termination_grace_seconds: Annotated[int, Field(ge=1)] = Field(
        default=120, description="Seconds a stopping pod gets to finish in-flight streams."
    )
    # "sample" if the Neuron runtime is denied mbind/set_mempolicy under "strict".
    security_profile: SecurityProfile = Field(
        default=SecurityProfile.STRICT,
        description=(
            "The vLLM pods' security context: strict (all capabilities dropped, no "
            "privilege escalation, RuntimeDefault seccomp) or sample (none set, as "
            "the experiment's sample)."
        ),
    )
    seed: int = Field(default=0, description="Seed of vLLM's sampling in both arms.")

    @model_validator(mode="before")
    @classmethod
    def _profile_defaults(cls, data: Any) -> Any:
        # `profile: new-deployment` alone must give a servable pair: the profile brings its
        # image, drafter, method and k unless they are named.
        if isinstance(data, dict) and "profile" in data:
            try:
                profile = ServingProfile(data["profile"])
            except ValueError:
                return data  # the field's own validation names the allowed values
            return {**PROFILES[profile].serving_defaults(), **data}
        return data

    @property
    def generation(self) -> Generation:
        return PROFILES[self.profile].generation

    @property
    def chunked_prefill(self) -> bool | None:
        """None (the server's default) unless the method needs it off: then on both arms."""
        return False if self.speculative_method == "dflash" else None

    @field_validator("num_speculative_tokens")
    @classmethod
    def _k_in_range(cls, value: int) -> int:
        rules.check_num_speculative_tokens(value, lambda field: f"serving.{field}")
        return value

    @field_validator("neuron_devices")
    @classmethod
    def _devices_form_a_connected_group(cls, value: int) -> int:
        if value not in CONNECTED_DEVICE_GROUP_SIZES:
            raise ValueError(
                f"serving.neuron_devices is {value}; the DRA driver allocates connected groups "
                f"of {list(CONNECTED_DEVICE_GROUP_SIZES)} devices"
            )
        return value

    @model_validator(mode="after")
    def _schedule_fits_the_deployed_engine(self, info: ValidationInfo) -> ServingConfig:
        # At synth (the CDK app): against the trn2 arms' engine, k and batch. Elsewhere the
        # local arm's limits apply (ExperimentConfig._schedule_fits_the_local_arm).

        schedule = self.speculation_schedule
        if schedule is not None and (info.context or {}).get(EKS_APP):
            apply_rule(
                lambda name: rules.check_speculation_schedule(
                    self.generation, schedule, self.num_speculative_tokens, self.max_num_seqs, name
                ),
                "serving",
            )
        return self

    @model_validator(mode="after")
    def _service_names_differ(self) -> ServingConfig:
        if self.baseline_service == self.speculative_service:
            raise ValueError("serving.baseline_service and speculative_service must differ")
        return self

    @model_validator(mode="after")
    def _compiled_length_covers_max_model_len(self) -> ServingConfig:
        apply_rule(
            lambda name: rules.check_compiled_length(
                self.max_model_len, self.compiled_max_model_len, name
            ),
            "serving",
        )
        return self

    @model_validator(mode="after")
    def _draft_is_not_the_target(self) -> ServingConfig:
        apply_rule(
            lambda name: rules.check_draft_is_not_target(self.target_model, self.draft_model, name),
            "serving",
        )
        return self

    @model_validator(mode="after")
    def _method_fits_the_generation(self) -> ServingConfig:
        apply_rule(
            lambda name: rules.check_speculative_method(
                self.generation, self.speculative_method, self.draft_model, name
            ),
            "serving",
        )
        return self

    @model_validator(mode="after")
    def _image_fits_the_profile(self) -> ServingConfig:
        if self.profile == ServingProfile.NEW_DEPLOYMENT and self.image == FORK_IMAGE:
            raise error_at(
                ("image",),
                "serving.image is the vLLM 0.9 fork's DLC, which has no vllm-neuron 1.x; with "
                f"serving.profile 'new-deployment' leave serving.image unset ({PLUGIN_IMAGE}) "
                "or name another image with vllm-neuron 1.x",
            )
        if self.profile == ServingProfile.REPRODUCE and self.image == PLUGIN_IMAGE:
            raise error_at(
                ("image",),
                "serving.image is the vllm-neuron 1.x DLC, which has no NxD Inference fork; with "
                "serving.profile 'reproduce' leave serving.image unset, or set serving.profile "
                "to 'new-deployment'",
            )
        return self

    @model_validator(mode="after")
    def _plugin_only_settings_stay_off_the_fork(self) -> ServingConfig:
        apply_rule(
            lambda name: rules.check_plugin_only_settings(
                self.generation, self.prefix_caching, self.chunked_prefill, name
            ),
            "serving",
        )
        return self

    @model_validator(mode="after")
    def _plugin_arms_run_alike(self) -> ServingConfig:
        # What the speculative method needs off (DFlash: prefix caching, chunked prefill) is
        # off on the baseline too, or the arms would differ in more than decoding.
        if self.generation == Generation.NEURON_PLUGIN:
            apply_rule(
                lambda name: rules.check_plugin_arms(
                    self.speculative_method,
                    self.prefix_caching,
                    self.chunked_prefill,
                    self.tensor_parallel_size,
                    name,
                ),
                "serving",
            )
        return self

    @model_validator(mode="after")
    def _dflash_k_is_its_block_size_minus_one(self) -> ServingConfig:
        if self.generation == Generation.NEURON_PLUGIN and self.speculative_method == "dflash":
            apply_rule(
                lambda name: rules.check_dflash_k(
                    self.num_speculative_tokens, self.dflash_block_size, name
                ),
                "serving",
            )
        return self

    @model_validator(mode="after")
    def _image_is_pinned(self) -> ServingConfig:
        problem = image_problem(self.image)
        if problem:
            raise error_at(
                ("image",),
                f"serving.image {self.image!r} cannot be pulled reproducibly: {problem}; "
                "give a tag (name:tag) or a digest (name@sha256:...)",
            )
        return self

    @model_validator(mode="after")
    def _models_fit_the_model_table(self) -> ServingConfig:
        # Offline-knowable: tokenizer family, EAGLE3 verifier, context window
        # (experiment/config/models.py); unknown models only warn.
        for field, message in serving_problems(
            self.target_model,
            self.draft_model,
            self.speculative_method,
            self.max_model_len,
            self.compiled_max_model_len,
        ):
            raise error_at((field,), message)
        return self

    def service_name(self, arm: Arm) -> str:
        return self.baseline_service if arm == Arm.BASELINE else self.speculative_service
