"""The two serving profiles, one choice (``serving.profile``): reproduce the published
experiment, or a new deployment on the supported Neuron stack. Every value a profile
derives -- generation, image, drafter, method, k, the trn2 tuning sweep, where acceptance
comes from, what to expect -- is in PROFILES (docs/serving-profiles.md)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from experiment.config.upstreams import neuron_dlc
from runtime.spec import Generation


class ServingProfile(StrEnum):
    """The one choice that sets the serving stack; every derived value follows from it
    (PROFILES; docs/serving-profiles.md)."""

    REPRODUCE = "reproduce"  # the published experiment, frozen
    NEW_DEPLOYMENT = "new-deployment"  # the supported Neuron stack


@dataclass(frozen=True)
class ProfileDefaults:
    """What a serving profile sets. The serving fields (image, draft_model,
    speculative_method, num_speculative_tokens) and the trn2 tuning fields (drafts, fit_k,
    holdout_k, predict_k_max) are defaults: a value set explicitly wins."""

    generation: Generation
    image: str
    image_source: str
    draft_model: str
    speculative_method: str | None
    num_speculative_tokens: int
    k_range: tuple[int, int]  # the k the trn2 plan measures, both ends included
    tuning_drafts: tuple[str, ...]
    fit_k: tuple[int, ...]
    holdout_k: tuple[int, ...]
    acceptance: str  # where acceptance figures come from
    drafter: str  # how far the drafter is validated
    expected: str  # the figures to expect on trn2

    def serving_defaults(self) -> dict[str, object]:
        return {
            "image": self.image,
            "draft_model": self.draft_model,
            "speculative_method": self.speculative_method,
            "num_speculative_tokens": self.num_speculative_tokens,
        }

    def tuning_defaults(self) -> dict[str, object]:
        return {
            "drafts": list(self.tuning_drafts),
            "fit_k": list(self.fit_k),
            "holdout_k": list(self.holdout_k),
            "predict_k_max": self.k_range[1],
        }


# The Neuron DLC the published experiment ran: vLLM 0.9 with the NxD Inference fork.
FORK_IMAGE = neuron_dlc("neuron-dlc-reproduce")
# Neuron SDK 2.33.0 (2026-10-19): vLLM 0.29.0 + vllm-neuron 1.2.0, Ubuntu 26.04, Python 3.14
# (awsdocs-neuron v2.33.0: release-notes/components/vllm-neuron, setup/pytorch/dlc.html).
PLUGIN_IMAGE = neuron_dlc("neuron-dlc-new-deployment")
# An EAGLE3 speculator trained for Qwen3-32B (huggingface.co/RedHatAI/Qwen3-32B-speculator.eagle3,
# built with vllm-project/speculators, validated by its authors on GPU vLLM). vllm-neuron's
# Qwen3 target implements SupportsEagle3, but its only registered EAGLE3 draft class is
# Eagle3LlamaForCausalLM and its EAGLE3 tutorials cover Llama 3.1 and GPT-OSS only
# (vllm-project/vllm-neuron: vllm_neuron/model/registry.py, docs/model-recipes/qwen3.md).
PLUGIN_DRAFT = "RedHatAI/Qwen3-32B-speculator.eagle3"
PROFILES: dict[ServingProfile, ProfileDefaults] = {
    ServingProfile.REPRODUCE: ProfileDefaults(
        generation=Generation.NEURON_FORK,
        image=FORK_IMAGE,
        image_source="the published experiment's DLC (Neuron SDK 2.26.1, vLLM 0.9.1 fork)",
        draft_model="Qwen/Qwen3-1.7B",
        speculative_method=None,  # rendered as the fork's "eagle" (runtime/render.py)
        num_speculative_tokens=7,
        k_range=(1, 10),
        tuning_drafts=("Qwen/Qwen3-0.6B", "Qwen/Qwen3-1.7B"),
        fit_k=(2, 8),
        holdout_k=(4, 6),
        acceptance=(
            "estimated client-side and labelled so: the 0.9 fork's V0 engine exports no "
            "vllm:spec_decode_* counters"
        ),
        drafter="the published experiment's plain draft, fused speculation on NxD Inference",
        expected=(
            "the published figures: inter-token latency about 15 ms with speculation vs about "
            "45 ms without on structured prompts (~3x), no gain on open-ended prompts, TTFT "
            "unchanged. NxD Inference's end of support on Trn2 is announced from Neuron 2.34: "
            "this profile is frozen"
        ),
    ),
    ServingProfile.NEW_DEPLOYMENT: ProfileDefaults(
        generation=Generation.NEURON_PLUGIN,
        image=PLUGIN_IMAGE,
        image_source="Neuron SDK 2.33.0 DLC: vLLM 0.29.0 + vllm-neuron 1.2.0, Python 3.14",
        draft_model=PLUGIN_DRAFT,
        speculative_method="eagle3",
        # The middle of the 3-7 vllm-neuron's docs give as typical (features-guide.md): a
        # starting point for the re-tune, not a measured optimum.
        num_speculative_tokens=5,
        k_range=(3, 7),
        tuning_drafts=(PLUGIN_DRAFT,),
        fit_k=(3, 7),
        holdout_k=(4, 5, 6),
        acceptance="vLLM's vllm:spec_decode_* counters (V1 engine), per position",
        drafter=(
            f"{PLUGIN_DRAFT}: vllm-neuron lists EAGLE3 as supported for Qwen3 (docs/model-"
            "recipes/qwen3.md); whether this speculators-format drafter loads there is not yet "
            "run on trn2: measure before trusting it"
        ),
        expected=(
            "none measured on trn2 yet: no published figure exists for this drafter on Neuron; "
            "re-tune k in 3-7 (python -m tune --target trn2) and read acceptance from the "
            "counters"
        ),
    ),
}
