"""The EAGLE3 head of the local run: vLLM's checkpoint layout, the drafting it is trained
for, deterministic and cached like the drafts, chosen by local.drafter and rendered by
runtime/ as the plugin profile's miniature."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

import pytest

from experiment import build_config
from experiment.config import Arm, LocalConfig
from experiment.loading import ConfigError
from local_run import eagle3
from local_run.arms import arm_commands
from local_run.models import MANIFEST, ModelPair, cache_key, describe_pair, ensure_models, head_key
from runtime.render import render

# Trains the tiny target and its EAGLE3 head with torch (twice for the threads test).
pytestmark = [pytest.mark.train, pytest.mark.timeout(1500)]

TINY: dict[str, object] = {
    "generator.documents": 120,
    "generator.train_steps": 2,
    "generator.batch_size": 2,
    "generator.sequence_length": 32,
    "generator.vocab_size": 600,
    "generator.padding.intermediate_size": 768,
    "generator.padding.extra_layers": 1,
    "drafter": "eagle3",
    "eagle3.prompts": 4,
    "eagle3.new_tokens": 16,
    "eagle3.train_steps": 3,
    "eagle3.intermediate_size": 96,
}
# What vllm 0.32's Eagle3Qwen3ForCausalLM.load_weights maps onto its modules
# (vllm/model_executor/models/qwen3_eagle3.py: "model." is prefixed to every name without
# lm_head, q/k/v_proj stack into qkv_proj and gate/up_proj into gate_up_proj; embed_tokens
# absent means the target's embedding is shared).
VLLM_CHECKPOINT_NAMES = {
    "fc.weight",
    "layers.0.input_layernorm.weight",
    "layers.0.hidden_norm.weight",
    "layers.0.self_attn.q_proj.weight",
    "layers.0.self_attn.k_proj.weight",
    "layers.0.self_attn.v_proj.weight",
    "layers.0.self_attn.o_proj.weight",
    "layers.0.self_attn.q_norm.weight",
    "layers.0.self_attn.k_norm.weight",
    "layers.0.post_attention_layernorm.weight",
    "layers.0.mlp.gate_proj.weight",
    "layers.0.mlp.up_proj.weight",
    "layers.0.mlp.down_proj.weight",
    "norm.weight",
    "lm_head.weight",
}


def tiny_local(models_dir: Path, **overrides: object) -> LocalConfig:
    context = {f"experiment.local.{k}": v for k, v in {**TINY, **overrides}.items()}
    context["experiment.local.models_dir"] = str(models_dir)
    return build_config(context).local


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> tuple[LocalConfig, ModelPair]:
    local = tiny_local(tmp_path_factory.mktemp("models"), **{"generator.threads": 1})
    return local, ensure_models(local, log=lambda _: None)


def test_head_is_saved_in_the_layout_vllm_loads(
    generated: tuple[LocalConfig, ModelPair],
) -> None:
    from safetensors import safe_open

    local, pair = generated
    head_dir = pair.draft_dir
    assert head_dir.parent.name == "eagle3" and head_dir.name.startswith("eagle3-")
    target = json.loads((pair.target_dir / "config.json").read_text())
    config = json.loads((head_dir / "config.json").read_text())
    assert config["architectures"] == ["Eagle3Qwen3ForCausalLM"]
    assert config["model_type"] == "qwen3"
    assert config["num_hidden_layers"] == 1
    assert config["intermediate_size"] == 96
    trained_layers = local.generator.target.num_layers
    assert (
        config["eagle_aux_hidden_state_layer_ids"]
        == [2, 3, 4]
        == [
            trained_layers // 2,
            trained_layers - 1,
            trained_layers,
        ]
    )
    # Every aux layer lies inside the served target (padding layers come after them).
    assert max(config["eagle_aux_hidden_state_layer_ids"]) <= target["num_hidden_layers"]
    for key in ("hidden_size", "vocab_size", "num_attention_heads", "head_dim"):
        assert config[key] == target[key], key
    assert config["draft_vocab_size"] == target["vocab_size"]
    hidden, heads, head_dim = target["hidden_size"], target["num_attention_heads"], 32
    with safe_open(str(head_dir / "model.safetensors"), "pt") as weights:
        assert set(weights.keys()) == VLLM_CHECKPOINT_NAMES
        assert weights.get_tensor("fc.weight").shape == (hidden, 3 * hidden)
        q_proj = weights.get_tensor("layers.0.self_attn.q_proj.weight")
        assert q_proj.shape == (heads * head_dim, 2 * hidden)  # embeds ++ hidden states
        assert weights.get_tensor("lm_head.weight").shape == (target["vocab_size"], hidden)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert digest(head_dir / name) == digest(pair.target_dir / name)
    draft = pair.manifest["draft"]
    assert draft["kind"] == "eagle3"
    assert pair.manifest["parameter_counts"]["draft"] == draft["parameters"]
    assert set(draft["evaluation"]) == {"structured", "open_ended", "structured_target_greedy"}
    for block in draft["evaluation"].values():
        accepted = block["accepted_by_position"]
        assert len(accepted) == eagle3.EVAL_POSITIONS
        assert accepted == sorted(accepted, reverse=True)  # a chain only shortens
    # Speculation replayed as vLLM runs it, on the target's answers to unseen prompts.
    replay = draft["speculation_replay"]["structured_target_greedy"]
    assert replay["drafts"] > 0
    assert len(replay["accepted_by_position"]) == eagle3.EVAL_POSITIONS
    assert replay["accepted_by_position"] == sorted(replay["accepted_by_position"], reverse=True)
    assert "EAGLE3 head" in describe_pair(pair)


def _reference_drafts(head: Any, aux: Any, embeds: Any, anchor: int, steps: int) -> list[Any]:
    """vLLM's drafting, one position at a time with an explicit KV cache: the first pass
    over the real states at positions 0..anchor, then each draft position at the next
    RoPE position, fed the previous pre-norm output, attending to everything cached."""
    import torch
    from transformers.models.qwen3.modeling_qwen3 import apply_rotary_pos_emb

    layer = head.layers[0]
    attn = layer.self_attn
    heads = attn.q_proj.out_features // 32
    kv_heads = attn.k_proj.out_features // 32

    def qkv(x: Any, position: int) -> tuple[Any, Any, Any]:
        cos, sin = head.rotary(x, torch.tensor([[position]]))
        q = attn.q_norm(attn.q_proj(x).view(1, 1, heads, 32)).transpose(1, 2)
        k = attn.k_norm(attn.k_proj(x).view(1, 1, kv_heads, 32)).transpose(1, 2)
        v = attn.v_proj(x).view(1, 1, kv_heads, 32).transpose(1, 2)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        return (
            q,
            k.repeat_interleave(heads // kv_heads, 1),
            v.repeat_interleave(heads // kv_heads, 1),
        )

    def forward(embed: Any, hidden: Any, position: int, cache: list[Any]) -> tuple[Any, Any]:
        x = torch.cat([layer.input_layernorm(embed), layer.hidden_norm(hidden)], -1)
        q, k, v = qkv(x.view(1, 1, -1), position)
        cache.append((k, v))
        keys = torch.cat([kv[0] for kv in cache], 2)
        values = torch.cat([kv[1] for kv in cache], 2)
        weights = torch.softmax(q @ keys.transpose(-1, -2) / math.sqrt(32), -1)
        out = attn.o_proj((weights @ values).transpose(1, 2).reshape(-1))
        residual = out + hidden
        prenorm = layer.mlp(layer.post_attention_layernorm(residual)) + residual
        return head.lm_head(head.norm(prenorm)), prenorm

    cache: list[Any] = []
    states = head.fc(aux[0])
    for position in range(anchor + 1):  # the first pass: token position+1 with state position
        logits, prenorm = forward(embeds[0, position + 1], states[position], position, cache)
    drafts = [logits]
    for step in range(1, steps):
        logits, prenorm = forward(embeds[0, anchor + 1 + step], prenorm, anchor + step, cache)
        drafts.append(logits)
    return drafts


def test_training_layout_is_vllms_drafting(generated: tuple[LocalConfig, ModelPair]) -> None:
    """The unrolled training pass computes, at every anchor, what vLLM's proposer computes
    there draft position by draft position: same attention, same RoPE positions, the head's
    own pre-norm state fed forward. A wrong mask or position would differ here."""
    import torch

    _, pair = generated
    config = json.loads((pair.draft_dir / "config.json").read_text())
    torch.manual_seed(0)
    head = eagle3.build_head(config).eval()
    hidden = config["hidden_size"]
    length, steps = 12, 4
    aux = torch.randn(1, length, 3 * hidden)
    embeds = torch.randn(1, length, hidden)
    fed = []
    for step in range(steps):
        shifted = torch.zeros_like(embeds)
        shifted[:, : length - 1 - step] = embeds[:, 1 + step :]
        fed.append(shifted)
    with torch.no_grad():
        unrolled = head.unrolled(aux, fed, steps)
        for anchor in (0, 3, length - steps - 1):
            reference = _reference_drafts(head, aux, embeds, anchor, steps)
            for step in range(steps):
                assert torch.allclose(unrolled[step][0, anchor], reference[step], atol=1e-5), (
                    anchor,
                    step,
                )


def test_generation_threads_change_neither_the_head_nor_its_key(tmp_path: Path) -> None:
    """As for the drafts: the head is byte-identical on 1 and 2 threads, so the thread
    count stays out of the cache key. Batches large enough to split across threads."""
    shapes = {"generator.batch_size": 8, "generator.sequence_length": 64}
    pairs = {}
    for threads in (1, 2):
        local = tiny_local(
            tmp_path / f"threads-{threads}", **shapes, **{"generator.threads": threads}
        )
        pairs[threads] = ensure_models(local, log=lambda _: None)
        assert pairs[threads].manifest["draft"]["torch_threads"] == threads
    one, two = pairs[1], pairs[2]
    assert one.draft_path == two.draft_path
    assert digest(one.draft_dir / "model.safetensors") == digest(
        two.draft_dir / "model.safetensors"
    )
    assert one.manifest["draft"]["evaluation"] == two.manifest["draft"]["evaluation"]


def test_head_is_cached_by_its_settings_and_the_draft_stays_the_default(
    generated: tuple[LocalConfig, ModelPair],
) -> None:
    local, pair = generated
    messages: list[str] = []
    again = ensure_models(local, log=messages.append)
    assert again.draft_dir == pair.draft_dir
    assert any(m.startswith("models: reusing eagle3 head") for m in messages)
    longer = tiny_local(Path(local.models_dir), **{"eagle3.train_steps": 4})
    assert cache_key(longer) == cache_key(local)  # the target is reused
    assert head_key(longer) != head_key(local)
    wider = tiny_local(Path(local.models_dir), **{"eagle3.batch_size": 4})
    assert head_key(wider) != head_key(local)
    deeper = tiny_local(Path(local.models_dir), **{"eagle3.ttt_steps": 2})
    assert head_key(deeper) != head_key(local)
    # A different target is a different head.
    other = tiny_local(Path(local.models_dir), **{"model_seed": 1})
    assert head_key(other) != head_key(local)
    # The default drafter is still the draft model, served from drafts/.
    drafted = tiny_local(Path(local.models_dir), drafter="draft-model")
    assert drafted.drafter == build_config({}).local.drafter == "draft-model"
    head_manifest = json.loads((pair.draft_dir / MANIFEST).read_text())
    assert head_manifest["settings"]["target_key"] == cache_key(local)


def test_drafter_renders_the_plugin_profiles_eagle3_flags_minus_neuron_options() -> None:
    default = build_config({})
    chosen = build_config({"experiment.local.drafter": "eagle3"})
    commands = {
        name: arm_commands(config, Path("/m/target"), Path("/m/eagle3/h"))
        for name, config in (("draft-model", default), ("eagle3", chosen))
    }
    # The baseline is the same command whichever drafter the speculative arm uses.
    assert commands["draft-model"][Arm.BASELINE] == commands["eagle3"][Arm.BASELINE]
    spec_flags = commands["eagle3"][Arm.SPECULATIVE].flags()
    base_flags = commands["eagle3"][Arm.BASELINE].flags()
    speculative = json.loads(spec_flags.pop("--speculative-config") or "")
    # Each request's acceptance in its response, whichever the drafter (runtime/render.py).
    assert spec_flags.pop("--per-request-spec-decode-metrics") == "summary"
    assert speculative == {
        "method": "eagle3",
        "model": "/m/eagle3/h",
        "num_speculative_tokens": default.serving.num_speculative_tokens,
    }
    assert {k: v for k, v in spec_flags.items() if k != "--port"} == {
        k: v for k, v in base_flags.items() if k != "--port"
    }
    drafted = json.loads(
        commands["draft-model"][Arm.SPECULATIVE].flags()["--speculative-config"] or ""
    )
    assert drafted["method"] == "draft_model" and set(drafted) == set(speculative)
    # k comes from the same setting for both drafters.
    k3 = build_config(
        {"experiment.local.drafter": "eagle3", "experiment.local.num_speculative_tokens": 3}
    )
    spec = render(k3.local_serving_spec(Arm.SPECULATIVE, "/t", "/d"))
    assert json.loads(spec.flags()["--speculative-config"] or "")["num_speculative_tokens"] == 3


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"drafter": "medusa"}, r"local\.drafter: Input should be 'draft-model' or 'eagle3'"),
        (
            {"drafter": "eagle3", "eagle3.ttt_steps": 15, "generator.sequence_length": 16},
            r"local\.eagle3\.ttt_steps 15 .* local\.generator\.sequence_length 16",
        ),
        ({"eagle3.train_steps": 0}, r"local\.eagle3\.train_steps: Input should be greater"),
        ({"eagle3.ttt_steps": 16}, r"local\.eagle3\.ttt_steps: Input should be less"),
    ],
)
def test_bad_drafter_settings_are_refused_with_the_setting_named(
    overrides: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        build_config({f"experiment.local.{k}": v for k, v in overrides.items()})
