"""The model generator: deterministic, cached by its parameters, loadable as a Qwen3 pair;
the served target computes the trained target's function; drafts by name."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from experiment import build_config
from experiment.config import LocalConfig
from experiment.loading import ConfigError
from local_run import corpus
from local_run.models import (
    MANIFEST,
    TRAINED_TARGET,
    ModelPair,
    cache_key,
    distillation_prompts,
    draft_batch_streams,
    draft_key,
    ensure_models,
)

# The module's pair trains inside its first test: 13 s on an idle machine, over 180 s at load 10.
pytestmark = pytest.mark.timeout(600)

TINY_WIDTH, TINY_EXTRA_LAYERS = 768, 1
TINY_DRAFT_SHARE = 0.3  # large enough that the tiny draft is padded too


def tiny_local(models_dir: Path, **generator: object) -> LocalConfig:
    """A pair small enough to generate in seconds (the real one trains for minutes)."""
    context: dict[str, object] = {
        "experiment.local.models_dir": str(models_dir),
        "experiment.local.generator.documents": 120,
        "experiment.local.generator.train_steps": 2,
        "experiment.local.generator.batch_size": 2,
        "experiment.local.generator.sequence_length": 32,
        "experiment.local.generator.vocab_size": 600,
        "experiment.local.generator.padding.intermediate_size": TINY_WIDTH,
        "experiment.local.generator.padding.extra_layers": TINY_EXTRA_LAYERS,
        "experiment.local.generator.distillation.prompts": 4,
        "experiment.local.generator.distillation.new_tokens": 8,
        "experiment.local.generator.distillation.train_steps": 2,
        "experiment.local.generator.distillation.corpus_rows": 1,
        "experiment.local.generator.drafts.small.weight_share": TINY_DRAFT_SHARE,
    }
    context.update({f"experiment.local.generator.{k}": v for k, v in generator.items()})
    return build_config(context).local


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> tuple[LocalConfig, ModelPair]:
    local = tiny_local(tmp_path_factory.mktemp("models"))
    return local, ensure_models(local, log=lambda _: None)


@pytest.mark.train
def test_pair_is_a_qwen3_target_and_smaller_draft_with_one_tokenizer(
    generated: tuple[LocalConfig, ModelPair],
) -> None:
    local, pair = generated
    dirs = {"target": pair.target_dir, "draft": pair.draft_dir}
    configs = {n: json.loads((d / "config.json").read_text()) for n, d in dirs.items()}
    for config in configs.values():
        assert config["architectures"] == ["Qwen3ForCausalLM"]
        assert config["model_type"] == "qwen3"
    assert configs["target"]["vocab_size"] == configs["draft"]["vocab_size"]
    assert configs["draft"]["num_hidden_layers"] < configs["target"]["num_hidden_layers"]
    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert digest(dirs["target"] / name) == digest(dirs["draft"] / name)
    sizes = {n: (d / "model.safetensors").stat().st_size for n, d in dirs.items()}
    assert sizes["draft"] < sizes["target"] < 8 * 2**20  # a few MB
    assert (pair.target_dir / "generation_config.json").is_file()
    assert pair.draft_dir.name.startswith(f"{local.generator.draft}-")
    assert set(pair.manifest["evaluation"]) == {
        "structured",
        "open_ended",
        "structured_target_greedy",
    }


@pytest.mark.train
def test_served_target_is_padded_but_computes_the_trained_function(
    generated: tuple[LocalConfig, ModelPair],
) -> None:
    import torch
    from transformers import AutoTokenizer, Qwen3ForCausalLM

    local, pair = generated
    shape = local.generator.target
    served = json.loads((pair.target_dir / "config.json").read_text())
    assert served["intermediate_size"] == TINY_WIDTH > shape.intermediate_size
    assert served["num_hidden_layers"] == shape.num_layers + TINY_EXTRA_LAYERS
    target = pair.manifest["target"]
    assert target["served_parameters"] > target["trained_parameters"]
    assert target["weight_bytes_per_step"] == target["served_parameters"] * 4
    disclosure = pair.manifest["weights_made_heavy"]  # the local run's report header says so
    assert disclosure["padded"] is True
    assert "made heavy without changing its function" in disclosure["note"]
    tokenizer = AutoTokenizer.from_pretrained(pair.target_dir)
    ids = tokenizer("Count from 1 to 9: 1, 2, 3", return_tensors="pt")["input_ids"]
    padded = Qwen3ForCausalLM.from_pretrained(pair.target_dir).eval()
    trained = Qwen3ForCausalLM.from_pretrained(pair.root / TRAINED_TARGET).eval()
    with torch.no_grad():
        assert torch.allclose(padded(ids).logits, trained(ids).logits, atol=1e-4)
        # The padding is real weight (read every step), not zeros that could be skipped...
        layer = padded.model.layers[shape.num_layers]
        assert layer.mlp.gate_proj.weight.abs().sum() > 0
        # ...and it is what makes the difference: a nonzero output projection changes logits.
        layer.self_attn.o_proj.weight.fill_(0.05)
        assert not torch.allclose(padded(ids).logits, trained(ids).logits, atol=1e-4)


@pytest.mark.train
def test_draft_is_padded_to_its_weight_share_with_the_same_function(
    generated: tuple[LocalConfig, ModelPair],
) -> None:
    import torch
    from transformers import AutoTokenizer, Qwen3ForCausalLM

    local, pair = generated
    draft = pair.manifest["draft"]
    assert draft["served_parameters"] > draft["parameters"]
    share = draft["served_parameters"] / pair.manifest["target"]["served_parameters"]
    assert share == pytest.approx(TINY_DRAFT_SHARE, abs=0.01)
    assert draft["weight_share_of_target"] == pytest.approx(share, abs=1e-4)
    assert draft["padding_max_logit_diff"] < 1e-4
    shape = local.generator.drafts["small"]
    served = Qwen3ForCausalLM.from_pretrained(pair.draft_dir).eval()
    assert served.config.intermediate_size > shape.intermediate_size
    tokenizer = AutoTokenizer.from_pretrained(pair.draft_dir)
    ids = tokenizer("- item 1: red\n- item 2:", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        # Zeroing the padded columns' inputs too leaves the logits as they were: they add 0.
        before = served(ids).logits
        served.model.layers[0].mlp.up_proj.weight[shape.intermediate_size :].zero_()
        assert torch.allclose(served(ids).logits, before, atol=1e-5)


@pytest.mark.train
def test_tokenizer_round_trips_and_has_the_chat_template(
    generated: tuple[LocalConfig, ModelPair],
) -> None:
    from transformers import AutoTokenizer

    _, pair = generated
    tokenizer = AutoTokenizer.from_pretrained(pair.target_dir)
    text = 'Count from 1 to 5: 1, 2, 3, 4, 5 {"id": 7} déjà vu'
    assert tokenizer.decode(tokenizer(text)["input_ids"]) == text
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert prompt == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert distillation_prompts(0, 1)[0].endswith("<|im_end|>\n<|im_start|>assistant\n")


@pytest.mark.train
def test_second_call_reuses_the_cache(generated: tuple[LocalConfig, ModelPair]) -> None:
    local, pair = generated
    before = digest(pair.target_dir / "model.safetensors")
    messages: list[str] = []
    again = ensure_models(local, log=messages.append)
    assert again == pair
    assert messages == [
        f"models: reusing the target in {pair.root}",
        f"models: reusing draft 'small' in {pair.draft_dir}",
    ]
    assert digest(pair.target_dir / "model.safetensors") == before


@pytest.mark.train
def test_same_seed_same_weights_and_a_new_parameter_a_new_pair(
    generated: tuple[LocalConfig, ModelPair], tmp_path: Path
) -> None:
    local, pair = generated
    fresh = ensure_models(tiny_local(tmp_path), log=lambda _: None)
    assert fresh.root.name == pair.root.name  # the key depends on parameters, not on the directory
    for before, after in ((pair.target_dir, fresh.target_dir), (pair.draft_dir, fresh.draft_dir)):
        assert digest(after / "model.safetensors") == digest(before / "model.safetensors")
    changed = tiny_local(tmp_path, train_steps=3)
    assert cache_key(changed) != cache_key(local)
    assert cache_key(local.model_copy(update={"model_seed": 1})) != cache_key(local)
    padded = tiny_local(tmp_path, **{"padding.extra_layers": 2})
    assert cache_key(padded) != cache_key(local)
    # A draft's own settings key the draft only: the target is reused.
    distilled = tiny_local(tmp_path, **{"distillation.new_tokens": 9})
    assert cache_key(distilled) == cache_key(local)
    assert draft_key(distilled, "small") != draft_key(local, "small")
    mixed = tiny_local(tmp_path, **{"distillation.corpus_rows": 2})
    assert cache_key(mixed) == cache_key(local)
    assert draft_key(mixed, "small") != draft_key(local, "small")


@pytest.mark.train
def test_generation_threads_change_neither_the_weights_nor_the_cache_key(
    tmp_path: Path,
) -> None:
    """make local generates on every core (local.generator.threads None); the thread count
    is left out of the cache key, which holds only while it changes no byte. Batches large
    enough that PyTorch splits the matrix products across both threads."""
    shapes = {"batch_size": 8, "sequence_length": 64, "train_steps": 3}
    pairs = {}
    for threads in (1, 2):
        local = tiny_local(tmp_path / f"threads-{threads}", threads=threads, **shapes)
        pairs[threads] = ensure_models(local, log=lambda _: None)
        assert pairs[threads].manifest["torch_threads"] == threads
        assert pairs[threads].manifest["draft"]["torch_threads"] == threads
    one, two = pairs[1], pairs[2]
    assert one.root.name == two.root.name and one.draft_path == two.draft_path
    for name in (TRAINED_TARGET, "target", one.draft_path):
        assert digest(one.root / name / "model.safetensors") == digest(
            two.root / name / "model.safetensors"
        ), name
    assert one.manifest["draft"]["evaluation"] == two.manifest["draft"]["evaluation"]


@pytest.mark.train
def test_a_second_draft_is_a_config_entry_and_reuses_the_target(
    generated: tuple[LocalConfig, ModelPair],
) -> None:
    local, pair = generated
    messages: list[str] = []
    large = ensure_models(local, log=messages.append, draft="large")
    assert large.root == pair.root and large.draft_dir != pair.draft_dir
    assert messages[0] == f"models: reusing the target in {pair.root}"
    shape = local.generator.drafts["large"]
    config = json.loads((large.draft_dir / "config.json").read_text())
    assert (config["hidden_size"], config["num_hidden_layers"]) == (
        shape.hidden_size,
        shape.num_layers,
    )
    assert large.manifest["draft"]["parameters"] > pair.manifest["draft"]["parameters"]
    extra = tiny_local(Path(local.models_dir), **{"drafts.tiny.num_layers": 1, "draft": "tiny"})
    assert set(extra.generator.drafts) == {"small", "large", "tiny"}
    assert cache_key(extra) == cache_key(local)
    with pytest.raises(ValueError, match=r"not one of local\.generator\.drafts"):
        ensure_models(local, draft="huge")


@pytest.mark.train
def test_interrupted_generation_leaves_no_half_pair(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from local_run import models

    def explode(*_: object) -> dict[str, object]:
        raise KeyboardInterrupt

    monkeypatch.setattr(models, "_generate_target", explode)
    local = tiny_local(tmp_path)
    with pytest.raises(KeyboardInterrupt):
        ensure_models(local, log=lambda _: None)
    assert [p.name for p in tmp_path.iterdir()] == [f"{cache_key(local)}.lock"]


@pytest.mark.train
def test_interrupted_draft_leaves_the_target_and_no_half_draft(
    generated: tuple[LocalConfig, ModelPair], monkeypatch: pytest.MonkeyPatch
) -> None:
    from local_run import models

    def explode(*_: object) -> dict[str, object]:
        raise KeyboardInterrupt

    local, pair = generated
    monkeypatch.setattr(models, "_generate_draft", explode)
    other = local.model_copy(
        update={
            "generator": local.generator.model_copy(
                update={
                    "distillation": local.generator.distillation.model_copy(
                        update={"new_tokens": 7}
                    )
                }
            )
        }
    )
    with pytest.raises(KeyboardInterrupt):
        ensure_models(other, log=lambda _: None)
    assert (pair.root / MANIFEST).is_file() and (pair.target_dir / "config.json").is_file()
    drafts = sorted(p.name for p in (pair.root / "drafts").iterdir())
    assert not any(name.startswith(".") for name in drafts)  # no scratch directory left
    assert f"small-{draft_key(other, 'small')}" not in drafts


def test_draft_batches_mix_corpus_rows_with_distilled_rows() -> None:
    corpus_stream, continuations = object(), object()
    streams = draft_batch_streams(corpus_stream, continuations, 4, 1)
    assert streams == [corpus_stream, continuations, continuations, continuations]
    assert draft_batch_streams(corpus_stream, continuations, 2, 0) == [continuations] * 2
    assert draft_batch_streams(corpus_stream, continuations, 2, 2) == [corpus_stream] * 2


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
        ({"generator.drafts.small.num_layers": 16}, "drafts.small must be smaller"),
        ({"generator.draft": "huge"}, "not one of local.generator.drafts"),
        ({"generator.padding.intermediate_size": 100}, "padding.intermediate_size 100"),
        ({"generator.target.head_dim": 48}, "not served by vLLM's CPU attention"),
        ({"generator.target.num_kv_heads": 3}, "multiple of num_kv_heads"),
        ({"generator.sequence_length": 1024}, "exceeds local.max_model_len"),
        ({"dtype": "float8"}, "local.dtype"),
        ({"generator.threads": 0}, r"local\.generator\.threads: Input should be greater than"),
        ({"generator.distillation.corpus_rows": 17}, "corpus_rows 17 exceeds"),
        (
            {"generator.distillation.prompts": 0, "generator.distillation.corpus_rows": 0},
            "nothing to train on",
        ),
    ],
)
def test_bad_generator_settings_are_rejected_with_a_hint(
    override: dict[str, object], message: str
) -> None:
    context = {f"experiment.local.{k}": v for k, v in override.items()}
    with pytest.raises(ConfigError, match=message):
        build_config(context)


@pytest.mark.train
def test_report_description_says_the_pair_is_generated_and_the_target_made_heavy(
    generated: tuple[LocalConfig, ModelPair],
) -> None:
    from local_run.models import describe_pair

    _, pair = generated
    text = describe_pair(pair)
    assert text.startswith("generated miniature models, not the configured checkpoints.")
    assert "made heavy without changing its function" in text
    assert "Draft 'small'" in text and "of the target's weight reads per step" in text
