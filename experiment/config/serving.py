"""``serving``: what both vLLM services share, and the speculative arm's settings."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from experiment.config.base import Arm, NamespaceName, Section, ServiceName, apply_rule, error_at
from experiment.config.cluster import CONNECTED_DEVICE_GROUP_SIZES
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
        apply_rule(
            lambda name: rules.check_compiled_length(
                self.max_model_len, self.compiled_max_model_len, name
            ),
            "serving",
        )
        apply_rule(
            lambda name: rules.check_draft_is_not_target(self.target_model, self.draft_model, name),
            "serving",
        )
        apply_rule(
            lambda name: rules.check_speculative_method(
                self.generation, self.speculative_method, self.draft_model, name
            ),
            "serving",
        )
        if self.generation == Generation.NEURON_PLUGIN and self.image == FORK_IMAGE:
            raise error_at(
                ("image",),
                "serving.image is the vLLM 0.9 fork's DLC, which has no vllm-neuron plugin; "
                "with generation 'neuron-plugin' set serving.image to an image with vllm-neuron "
                "on vLLM >= 0.11 (docs/serving.md, moving to the plugin generation)",
            )
        return self

    def service_name(self, arm: Arm) -> str:
        return self.baseline_service if arm == Arm.BASELINE else self.speculative_service
