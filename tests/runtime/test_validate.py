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
from runtime.validate import (
    SpecError,
    check_dflash_draft,
    check_dflash_k,
    check_draft_compatibility,
    validate_spec,
)


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


@pytest.mark.parametrize("method", [None, "draft_model", "eagle"])
def test_plugin_rejects_methods_1x_does_not_take(spec, method) -> None:
    # "eagle" was 0.1.x-0.2.x's; 1.x's proposers assert "eagle3" or "dflash".
    plugin = dataclasses.replace(
        spec, generation=Generation.NEURON_PLUGIN, speculative_method=method
    )
    with pytest.raises(SpecError, match=r"speculates only with \['eagle3', 'dflash'\]"):
        render(plugin)


@pytest.mark.parametrize("method", ["eagle3", "dflash"])
def test_plugin_rejects_a_plain_draft_whatever_the_method(spec, method) -> None:
    # The default spec's draft is the fork's plain Qwen3-1.7B.
    plugin = dataclasses.replace(
        spec, generation=Generation.NEURON_PLUGIN, speculative_method=method
    )
    with pytest.raises(SpecError, match=r"Qwen3-1\.7B is a plain model.*no plain draft-model"):
        render(plugin)


def _plugin_spec(spec, **changes):
    values = {
        "generation": Generation.NEURON_PLUGIN,
        "draft_model": "/m/RedHatAI/Qwen3-32B-speculator.eagle3",
        "speculative_method": "eagle3",
        **changes,
    }
    return dataclasses.replace(spec, **values)


def _dflash_spec(spec, **changes):
    values = {
        "draft_model": "/m/z-lab/Qwen3-4B-DFlash-b16",
        "speculative_method": "dflash",
        "tensor_parallel_size": 8,
        "claimed_logical_cores": 8,
        "chunked_prefill": False,
        **changes,
    }
    return _plugin_spec(spec, **values)


def test_plugin_accepts_an_eagle3_and_a_dflash_draft(spec) -> None:
    validate_spec(_plugin_spec(spec))
    validate_spec(_dflash_spec(spec))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"prefix_caching": True}, r"prefix_caching is on, but DFlash .* set prefix_caching"),
        ({"chunked_prefill": None}, r"chunked_prefill is None.*set chunked_prefill to false"),
        ({"chunked_prefill": True}, r"chunked_prefill is True"),
        (
            {"tensor_parallel_size": 32, "claimed_logical_cores": 32},
            r"tensor_parallel_size is 32, but DFlash on Neuron is validated for \[4, 8\]",
        ),
    ],
)
def test_dflash_refuses_what_its_proposer_refuses(spec, changes, message) -> None:
    with pytest.raises(SpecError, match=message):
        validate_spec(_dflash_spec(spec, **changes))


def test_eagle3_allows_prefix_caching_if_both_arms_have_it(spec) -> None:
    validate_spec(_plugin_spec(spec, prefix_caching=True))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"prefix_caching": True}, r"prefix_caching is on, but only the plugin generation"),
        ({"chunked_prefill": False}, r"chunked_prefill is set, but only the plugin"),
    ],
)
def test_the_fork_stays_as_published(spec, changes, message) -> None:
    with pytest.raises(SpecError, match=message):
        validate_spec(dataclasses.replace(spec, **changes))


@pytest.mark.parametrize(
    ("k", "block_size", "message"),
    [
        (7, 16, r"num_speculative_tokens is 7, but a DFlash drafter with block_size 16 needs "
                r"exactly 15"),
        (15, None, r"dflash_block_size is not set"),
    ],
)  # fmt: skip
def test_dflash_k_is_the_drafters_block_size_minus_one(k, block_size, message) -> None:
    check_dflash_k(15, 16)
    with pytest.raises(SpecError, match=message):
        check_dflash_k(k, block_size)


def test_serve_reads_the_dflash_block_size_from_the_drafter(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"block_size": 10}))
    assert check_dflash_draft(tmp_path, 9) == []
    with pytest.raises(SpecError, match="needs exactly 9"):
        check_dflash_draft(tmp_path, 15)
    assert "not checked" in check_dflash_draft(tmp_path / "absent", 15)[0]


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
