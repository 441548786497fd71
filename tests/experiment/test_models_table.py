"""What is knowable offline is refused at synth: empty image tags, drafts whose tokenizer
cannot match the target's, lengths beyond the context window; unknown models only warn."""

from __future__ import annotations

import warnings

import pytest

from experiment import ConfigError, build_config
from experiment.config.models import (
    KNOWN_MODELS,
    ModelKind,
    UnknownModelWarning,
    image_problem,
)

IMAGE = "public.ecr.aws/neuron/pytorch-inference-vllm-neuronx"


def _reject(overrides: dict[str, str], *needles: str) -> str:
    with pytest.raises(ConfigError) as caught:
        build_config({f"experiment.{k}": v for k, v in overrides.items()})
    message = str(caught.value)
    for needle in needles:
        assert needle in message, message
    return message


def test_the_defaults_and_the_plugin_profile_pass_without_warnings() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnknownModelWarning)
        build_config({})
        build_config({"experiment.serving.profile": "new-deployment"})


@pytest.mark.parametrize(
    ("image", "problem"),
    [
        (f"{IMAGE}:", "tag is empty"),
        (IMAGE, "no tag"),
        (f"{IMAGE}:bad tag", "not a valid tag"),
        (f"{IMAGE}@sha256:abc", "not sha256"),
    ],
)
def test_an_image_without_a_usable_tag_is_refused(image: str, problem: str) -> None:
    _reject({"serving.image": image}, "serving.image", problem, "give a tag")


def test_a_tag_or_a_digest_is_fine_and_a_registry_port_is_not_a_tag() -> None:
    assert image_problem(f"{IMAGE}:0.9.1-neuronx-py311-sdk2.26.1-ubuntu22.04") is None
    assert image_problem(f"{IMAGE}@sha256:{'a' * 64}") is None
    assert image_problem("registry.example:5000/team/vllm:1.0") is None
    assert image_problem("registry.example:5000/team/vllm") is not None


def test_a_length_beyond_the_targets_context_is_refused() -> None:
    _reject({"serving.max_model_len": "65536"}, "serving.max_model_len 65536", "40960")
    _reject({"serving.compiled_max_model_len": "50000"}, "serving.compiled_max_model_len", "40960")
    assert build_config({"experiment.serving.max_model_len": "40960"}).serving.max_model_len


def test_a_draft_of_another_tokenizer_family_is_refused(monkeypatch) -> None:
    other = KNOWN_MODELS["Qwen/Qwen3-1.7B"].__class__(
        family="llama3", vocab_size=128256, context=131072, kind=ModelKind.PLAIN, source="test"
    )
    monkeypatch.setitem(KNOWN_MODELS, "meta-llama/Llama-3.2-1B", other)
    _reject(
        {"serving.draft_model": "meta-llama/Llama-3.2-1B"},
        "serving.draft_model",
        "cannot share a tokenizer",
        "llama3",
    )


def test_an_eagle3_head_drafts_only_for_its_verifier_and_only_as_eagle3() -> None:
    plugin = {"serving.profile": "new-deployment"}
    _reject(
        {**plugin, "serving.target_model": "Qwen/Qwen3-8B"},
        "serving.draft_model",
        "trained on 'Qwen/Qwen3-32B'",
    )
    _reject(
        {"serving.draft_model": "RedHatAI/Qwen3-32B-speculator.eagle3"},
        "serving.speculative_method",
        "'eagle3'",
    )


def test_a_plain_draft_with_eagle3_is_refused() -> None:
    _reject(
        {"serving.speculative_method": "eagle3"},
        "serving.speculative_method",
        "is a plain model, not an EAGLE3 head",
    )


def test_a_speculator_head_cannot_be_the_target() -> None:
    _reject(
        {"serving.target_model": "RedHatAI/Qwen3-32B-speculator.eagle3",
         "serving.draft_model": "Qwen/Qwen3-1.7B"},
        "serving.target_model", "use its verifier",
    )  # fmt: skip


def test_an_unknown_model_is_allowed_with_a_warning_naming_what_was_not_checked() -> None:
    with pytest.warns(UnknownModelWarning) as caught:
        config = build_config(
            {"experiment.serving.target_model": "acme/Big-70B",
             "experiment.serving.draft_model": "acme/Small-1B",
             "experiment.serving.max_model_len": "100000"}
        )  # fmt: skip
    assert config.serving.target_model == "acme/Big-70B"
    text = str(caught[0].message)
    assert "context window" in text and "tokenizer family" in text
    assert "acme/Big-70B" in text and "acme/Small-1B" in text


def test_every_entry_names_its_source_and_every_head_its_verifier() -> None:
    for model, known in KNOWN_MODELS.items():
        assert known.source, model
        if known.kind == ModelKind.EAGLE3:
            assert known.verifier in KNOWN_MODELS, model
            assert KNOWN_MODELS[known.verifier].family == known.family
