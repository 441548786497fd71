"""``serving``: what both vLLM services share, and the speculative arm's settings."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from experiment.config.base import Arm, NamespaceName, Section, ServiceName, apply_rule, error_at
from experiment.config.cluster import CONNECTED_DEVICE_GROUP_SIZES
from experiment.config.models import image_problem, serving_problems
from runtime import validate as rules
from runtime.spec import Generation

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


class ServingConfig(Section):
    """What both vLLM services share, plus the speculative settings of the SD arm."""

    namespace: NamespaceName = Field(
        default="qwen", description="Kubernetes namespace of both vLLM services and the load test."
    )
    baseline_service: ServiceName = Field(
        default="qwen-vllm",
        description=(
            "Service (and Deployment) name of the baseline arm; differs from speculative_service."
        ),
    )
    speculative_service: ServiceName = Field(
        default="qwen-sd-vllm",
        description="Service (and Deployment) name of the speculative-decoding arm.",
    )
    generation: Generation = Field(
        default=Generation.NEURON_FORK,
        description=(
            "Which vLLM on Neuron serves: neuron-fork (the published vLLM 0.9 NxD "
            "Inference fork) or neuron-plugin (vllm-neuron on vLLM >= 0.11)."
        ),
    )
    image: str = Field(
        default=FORK_IMAGE,
        description=(
            "Container image of both vLLM services; with neuron-plugin, an image with"
            " vllm-neuron (not the fork's DLC)."
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
            "target. neuron-plugin defaults to an EAGLE3 speculator."
        ),
    )
    speculative_method: str | None = Field(
        default=None,
        description=(
            "vLLM speculative method; null: the generation's default (the fork "
            "renders 'eagle'). neuron-plugin defaults to 'eagle3'."
        ),
    )
    num_speculative_tokens: int = Field(
        default=7,
        description=(
            "k, the tokens the draft proposes per step (runtime/validate.py gives the range)."
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
    def _generation_defaults(cls, data: Any) -> Any:
        # `generation: neuron-plugin` alone must give a servable arm: the plugin speculates
        # only with EAGLE-family drafts, so it brings its own draft and method unless named.
        if isinstance(data, dict) and data.get("generation") == Generation.NEURON_PLUGIN:
            return {**PLUGIN_DEFAULTS, **data}
        return data

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
    def _plugin_generation_has_a_plugin_image(self) -> ServingConfig:
        if self.generation == Generation.NEURON_PLUGIN and self.image == FORK_IMAGE:
            raise error_at(
                ("image",),
                "serving.image is the vLLM 0.9 fork's DLC, which has no vllm-neuron plugin; "
                "with generation 'neuron-plugin' set serving.image to an image with vllm-neuron "
                "on vLLM >= 0.11 (docs/serving.md, moving to the plugin generation)",
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
