"""Every rejection of runtime.validate, with a message that says what to change."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from experiment import build_config
from experiment.config import Arm
from runtime.render import render
from runtime.spec import Generation
from runtime.validate import SpecError, check_draft_compatibility, validate_spec


@pytest.fixture
def spec():
    return build_config({}).serving_spec(Arm.SPECULATIVE)


def test_defaults_are_valid(spec) -> None:
    validate_spec(spec)
    validate_spec(build_config({}).serving_spec(Arm.BASELINE))


@pytest.mark.parametrize("k", [0, 16, -1])
def test_k_out_of_range(spec, k: int) -> None:
    with pytest.raises(SpecError, match="choose k between 1 and 15"):
        render(dataclasses.replace(spec, num_speculative_tokens=k))


def test_draft_without_k(spec) -> None:
    with pytest.raises(SpecError, match="num_speculative_tokens is not"):
        validate_spec(dataclasses.replace(spec, num_speculative_tokens=None))


def test_k_without_draft(spec) -> None:
    with pytest.raises(SpecError, match="draft_model is not"):
        validate_spec(dataclasses.replace(spec, draft_model=None))


def test_draft_equal_to_target(spec) -> None:
    with pytest.raises(SpecError, match="draft_model is the target itself"):
        validate_spec(dataclasses.replace(spec, draft_model=spec.target_model))


def test_tp_times_lnc_must_match_claim(spec) -> None:
    with pytest.raises(SpecError, match="tensor_parallel_size to 32 or change the claimed"):
        validate_spec(dataclasses.replace(spec, tensor_parallel_size=16))


def test_claim_must_be_known(spec) -> None:
    with pytest.raises(SpecError, match="claimed_logical_cores is missing"):
        validate_spec(dataclasses.replace(spec, claimed_logical_cores=None))


def test_lnc_must_be_1_or_2(spec) -> None:
    with pytest.raises(SpecError, match="logical_neuron_cores must be 1 or 2"):
        validate_spec(dataclasses.replace(spec, logical_neuron_cores=4))


def test_max_model_len_within_compiled_length(spec) -> None:
    with pytest.raises(SpecError, match="exceeds the compiled length 1024"):
        validate_spec(dataclasses.replace(spec, max_model_len=2048))


def test_neuron_needs_artifacts_path(spec) -> None:
    with pytest.raises(SpecError, match="compiled_artifacts_path is empty"):
        validate_spec(dataclasses.replace(spec, compiled_artifacts_path=None))


@pytest.mark.parametrize("method", [None, "draft_model"])
def test_plugin_rejects_methods_it_does_not_know(spec, method) -> None:
    plugin = dataclasses.replace(
        spec, generation=Generation.NEURON_PLUGIN, speculative_method=method
    )
    with pytest.raises(SpecError, match="speculates only with EAGLE-family drafts: set it to"):
        render(plugin)


@pytest.mark.parametrize("method", ["eagle", "eagle3"])
def test_plugin_rejects_a_plain_draft_whatever_the_method(spec, method) -> None:
    # The default spec's draft is the fork's plain Qwen3-1.7B.
    plugin = dataclasses.replace(
        spec, generation=Generation.NEURON_PLUGIN, speculative_method=method
    )
    with pytest.raises(SpecError, match=r"Qwen3-1\.7B is a plain model"):
        render(plugin)


def test_plugin_accepts_its_default_eagle3_draft() -> None:
    config = build_config(
        {"serving.generation": "neuron-plugin", "serving.image": "example.com/vllm-neuron:0.3"}
    )
    spec = config.serving_spec(Arm.SPECULATIVE)
    validate_spec(spec)
    assert spec.speculative_method == "eagle3"
    assert spec.draft_model and spec.draft_model.endswith("RedHatAI/Qwen3-32B-speculator.eagle3")
    with pytest.raises(SpecError, match=r"EAGLE3 draft but .*speculative_method is 'eagle'"):
        validate_spec(dataclasses.replace(spec, speculative_method="eagle"))


def test_local_cpu_rejects_other_methods_and_tp() -> None:
    config = build_config({})
    local = config.local_serving_spec(Arm.SPECULATIVE, "/t", "/d")
    with pytest.raises(SpecError, match="must be 'draft_model'"):
        validate_spec(dataclasses.replace(local, speculative_method="eagle"))
    with pytest.raises(SpecError, match="set tensor_parallel_size to 1"):
        validate_spec(dataclasses.replace(local, tensor_parallel_size=2))


def _model(directory: Path, vocab: int, tokenizer: str) -> Path:
    directory.mkdir(parents=True)
    (directory / "config.json").write_text(json.dumps({"vocab_size": vocab}))
    (directory / "tokenizer.json").write_text(tokenizer)
    return directory


def test_draft_compatibility_accepts_same_tokenizer(tmp_path: Path) -> None:
    target = _model(tmp_path / "t", 151936, '{"vocab": 1}')
    draft = _model(tmp_path / "d", 151936, '{"vocab": 1}')
    assert check_draft_compatibility(target, draft) == []


def test_draft_compatibility_rejects_other_vocab_size(tmp_path: Path) -> None:
    target = _model(tmp_path / "t", 151936, "{}")
    draft = _model(tmp_path / "d", 32000, "{}")
    with pytest.raises(SpecError, match="same vocabulary"):
        check_draft_compatibility(target, draft)


def test_draft_compatibility_rejects_other_tokenizer(tmp_path: Path) -> None:
    target = _model(tmp_path / "t", 151936, '{"vocab": 1}')
    draft = _model(tmp_path / "d", 151936, '{"vocab": 2}')
    with pytest.raises(SpecError, match="different tokenizers"):
        check_draft_compatibility(target, draft)


def test_draft_compatibility_notes_unreachable_files(tmp_path: Path) -> None:
    notes = check_draft_compatibility(tmp_path / "missing-t", tmp_path / "missing-d")
    assert len(notes) == 2 and "not checked" in notes[0]
