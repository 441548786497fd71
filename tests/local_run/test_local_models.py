"""The model generator: deterministic, cached by its parameters, loadable as a Qwen3 pair."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from experiment import build_config
from experiment.config import LocalConfig
from experiment.loading import ConfigError
from local_run import corpus
from local_run.models import DRAFT, TARGET, cache_key, ensure_models


def tiny_local(models_dir: Path, **generator: object) -> LocalConfig:
    """A pair small enough to generate in seconds (the real one trains for minutes)."""
    context = {
        "experiment.local.models_dir": str(models_dir),
        "experiment.local.generator.documents": 120,
        "experiment.local.generator.train_steps": 2,
        "experiment.local.generator.batch_size": 2,
        "experiment.local.generator.sequence_length": 32,
        "experiment.local.generator.vocab_size": 600,
    }
    context.update({f"experiment.local.generator.{k}": v for k, v in generator.items()})
    return build_config(context).local


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> tuple[LocalConfig, Path]:
    local = tiny_local(tmp_path_factory.mktemp("models"))
    return local, ensure_models(local, log=lambda _: None).root


def test_pair_is_a_qwen3_target_and_smaller_draft_with_one_tokenizer(
    generated: tuple[LocalConfig, Path],
) -> None:
    _, root = generated
    configs = {n: json.loads((root / n / "config.json").read_text()) for n in (TARGET, DRAFT)}
    for config in configs.values():
        assert config["architectures"] == ["Qwen3ForCausalLM"]
        assert config["model_type"] == "qwen3"
    assert configs[TARGET]["vocab_size"] == configs[DRAFT]["vocab_size"]
    assert configs[DRAFT]["num_hidden_layers"] < configs[TARGET]["num_hidden_layers"]
    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert digest(root / TARGET / name) == digest(root / DRAFT / name)
    sizes = {n: (root / n / "model.safetensors").stat().st_size for n in (TARGET, DRAFT)}
    assert sizes[DRAFT] < sizes[TARGET] < 8 * 2**20  # a few MB
    assert (root / TARGET / "generation_config.json").is_file()
    manifest = json.loads((root / "manifest.json").read_text())
    assert set(manifest["evaluation"]) == {"structured", "open_ended"}


def test_tokenizer_round_trips_and_has_the_chat_template(
    generated: tuple[LocalConfig, Path],
) -> None:
    from transformers import AutoTokenizer

    _, root = generated
    tokenizer = AutoTokenizer.from_pretrained(root / TARGET)
    text = 'Count from 1 to 5: 1, 2, 3, 4, 5 {"id": 7} déjà vu'
    assert tokenizer.decode(tokenizer(text)["input_ids"]) == text
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert prompt == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_second_call_reuses_the_cache(generated: tuple[LocalConfig, Path]) -> None:
    local, root = generated
    before = digest(root / TARGET / "model.safetensors")
    messages: list[str] = []
    again = ensure_models(local, log=messages.append)
    assert again.root == root
    assert messages == [f"models: reusing {root}"]
    assert digest(root / TARGET / "model.safetensors") == before


def test_same_seed_same_weights_and_a_new_parameter_a_new_pair(
    generated: tuple[LocalConfig, Path], tmp_path: Path
) -> None:
    local, root = generated
    fresh = ensure_models(tiny_local(tmp_path), log=lambda _: None)
    assert fresh.root.name == root.name  # the key depends on parameters, not on the directory
    for name in (TARGET, DRAFT):
        assert digest(fresh.root / name / "model.safetensors") == digest(
            root / name / "model.safetensors"
        )
    changed = tiny_local(tmp_path, train_steps=3)
    assert cache_key(changed) != cache_key(local)
    assert cache_key(local.model_copy(update={"model_seed": 1})) != cache_key(local)


def test_interrupted_generation_leaves_no_half_pair(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from local_run import models

    def explode(*_: object) -> dict[str, object]:
        raise KeyboardInterrupt

    monkeypatch.setattr(models, "_generate", explode)
    local = tiny_local(tmp_path)
    with pytest.raises(KeyboardInterrupt):
        ensure_models(local, log=lambda _: None)
    assert [p.name for p in tmp_path.iterdir()] == [f"{cache_key(local)}.lock"]


def test_corpus_is_deterministic_and_mixes_structured_and_prose() -> None:
    prose = corpus.stdlib_prose()
    assert len(prose) > 50
    first = list(corpus.documents(0, 300, prose))
    assert first == list(corpus.documents(0, 300, prose))
    assert first != list(corpus.documents(1, 300, prose))
    kinds = {kind for kind, _ in first}
    assert kinds == {corpus.STRUCTURED_KIND, corpus.OPEN_ENDED_KIND}
    assert any(text.startswith("<|im_start|>") for _, text in first)  # chat layout present


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"generator.draft.num_layers": 16}, "draft must be smaller"),
        ({"generator.target.head_dim": 48}, "not served by vLLM's CPU attention"),
        ({"generator.target.num_kv_heads": 3}, "multiple of num_kv_heads"),
        ({"generator.sequence_length": 1024}, "exceeds local.max_model_len"),
        ({"dtype": "float8"}, "local.dtype"),
    ],
)
def test_bad_generator_settings_are_rejected_with_a_hint(
    override: dict[str, object], message: str
) -> None:
    context = {f"experiment.local.{k}": v for k, v in override.items()}
    with pytest.raises(ConfigError, match=message):
        build_config(context)
