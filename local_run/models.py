"""Generate (or reuse) the tiny Qwen3-architecture target and its drafts for the local run.

Hubs are unreachable, so the project makes its own models: a byte-level BPE tokenizer
trained on ``local_run.corpus`` and a target with the Qwen3 architecture (so vLLM loads it
with its real Qwen3 code), trained for a few hundred CPU steps. Two things make the
miniature behave like a large target with a same-family draft:

- **Heavy without changing the function.** The served target is the trained one plus
  padding (``config.local.generator.padding``): extra MLP columns whose down-projection is
  zero and extra layers whose attention ``o_proj`` and MLP ``down_proj`` are zero. Every
  padded weight is read on every step, so a decode step costs what a ~50M-parameter model
  costs (weight reads), while the logits are the trained model's (checked at generation
  time and recorded as ``padding_max_logit_diff``).
- **Drafts distilled on the target's own greedy outputs** of structured chat prompts
  (``config.local.generator.distillation``), next to the same corpus; any number of drafts,
  by name (``config.local.generator.drafts``).

Everything is a function of ``config.local.model_seed`` and ``config.local.generator``:
the target is cached under ``models_dir/<target key>/`` and each draft under
``drafts/<name>-<draft key>/`` inside it, so a new draft entry trains only that draft.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import math
import os
import platform
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from experiment.config import DraftShape, LocalConfig, ModelGeneratorConfig, TinyModelShape
from experiment.loading import PROJECT_ROOT
from loadtest.processes import TRAIN_EVENT, enter_phase
from local_run import corpus, eagle3
from local_run.machine import usable_cores
from local_run.progress import Log

# Bump when the generator's code changes what it produces: a new version is a new cache key.
GENERATOR_VERSION = 4
ENDOFTEXT, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = (ENDOFTEXT, IM_START, IM_END)
# Qwen's ChatML layout, the one the chat-form training documents use.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
MANIFEST = "manifest.json"
TARGET, DRAFT = "target", "draft"
EAGLE3_DRAFTER = eagle3.EAGLE3_KIND  # local.drafter's value for the EAGLE3 head
EAGLE3_DIR = "eagle3"
# The trained, unpadded target: the teacher of every draft generated later.
TRAINED_TARGET = "trained-target"
DRAFTS = "drafts"
EVAL_DOCUMENTS = 200
EVAL_PROMPTS = 32
GREEDY_KIND = "structured_target_greedy"
DISTILL_BATCH = 64
FLOAT32_BYTES = 4
MODEL_FILES = ("config.json", "generation_config.json", "model.safetensors")


@dataclass(frozen=True)
class ModelPair:
    """A generated target and one draft on disk; ``manifest`` records how both were made
    and how they scored (the target's entries, plus the draft's under ``draft``)."""

    root: Path
    manifest: dict[str, Any]
    draft_path: str = DRAFT  # relative to root

    @property
    def target_dir(self) -> Path:
        return self.root / TARGET

    @property
    def draft_dir(self) -> Path:
        return self.root / self.draft_path


def target_parameters(local: LocalConfig) -> dict[str, Any]:
    """Everything the tokenizer and the target depend on (their cache key hashes this)."""
    generator = local.generator
    return {
        "generator_version": GENERATOR_VERSION,
        "seed": local.model_seed,
        "max_position_embeddings": local.max_model_len,
        "generator": generator.model_dump(
            mode="json", exclude={"drafts", "draft", "distillation", "threads"}
        ),
        "python": platform.python_version(),  # the prose comes from this Python's stdlib
    }


def draft_parameters(local: LocalConfig, name: str) -> dict[str, Any]:
    """Everything one draft depends on: its teacher (the target) and its own settings."""
    generator = local.generator
    return {
        "target_key": cache_key(local),
        "name": name,
        "shape": generator.drafts[name].model_dump(mode="json"),
        "distillation": generator.distillation.model_dump(mode="json"),
    }


def head_parameters(local: LocalConfig) -> dict[str, Any]:
    """Everything the EAGLE3 head depends on: its target and its own settings."""
    generator = local.generator
    return {
        "head_version": eagle3.HEAD_VERSION,
        "target_key": cache_key(local),
        "eagle3": local.eagle3.model_dump(mode="json"),
        "sequence_length": generator.sequence_length,
    }


def _digest(parameters: dict[str, Any]) -> str:
    blob = json.dumps(parameters, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def cache_key(local: LocalConfig) -> str:
    """The target's key (tokenizer, target, padding, training)."""
    return _digest(target_parameters(local))


def draft_key(local: LocalConfig, name: str) -> str:
    return _digest(draft_parameters(local, name))


def head_key(local: LocalConfig) -> str:
    return _digest(head_parameters(local))


def head_path(local: LocalConfig) -> str:
    """Relative to the target's directory; the name says eagle3, as trn2's drafter's does."""
    return f"{EAGLE3_DIR}/eagle3-{head_key(local)}"


def models_root(local: LocalConfig) -> Path:
    path = Path(local.models_dir)
    return path if path.is_absolute() else PROJECT_ROOT / path


def _offline() -> None:
    # Nothing here may reach a hub; fail fast instead of hanging on a network call.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    # Two runs (or test sessions) generating the same models wait for each other.
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextlib.contextmanager
def _scratch(final: Path) -> Iterator[Path]:
    # Build in a scratch directory and rename: an interrupted run leaves nothing half made.
    final.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=final.parent))
    try:
        yield scratch
        scratch.rename(final)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


@contextlib.contextmanager
def _threads(local: LocalConfig) -> Iterator[None]:
    """PyTorch on ``local.generator.threads`` threads (default: every core this process may
    use) while a model is generated. Nothing else of the local run runs meanwhile: the servers
    start once both models exist, since OpenMP threads that share a core with another busy
    process wait on each other (measured at load average 5 on 2 cores: a training step
    1.5-2.2 s on one thread, 6.6-8.3 s on two). On an idle 2-core machine two threads train
    1.6x faster, with byte-identical weights (test_local_models.py)."""
    import torch

    count = local.generator.threads or usable_cores()
    previous = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def _draft_name(local: LocalConfig, draft: str | None) -> str:
    name = draft or local.generator.draft
    if name not in local.generator.drafts:
        raise ValueError(
            f"draft {name!r} is not one of local.generator.drafts {sorted(local.generator.drafts)}"
        )
    return name


def _draft_path(local: LocalConfig, name: str) -> str:
    return f"{DRAFTS}/{name}-{draft_key(local, name)}"


def _ensure_target(local: LocalConfig, final: Path, key: str, log: Log) -> None:
    if (final / MANIFEST).is_file():
        log(f"models: reusing the target in {final}")
        return
    log(f"models: generating the tokenizer and target into {final} (cached)")
    with _scratch(final) as scratch, _threads(local):
        manifest = _generate_target(local, scratch, log)
        manifest["cache_key"] = key
        (scratch / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True))


def ensure_models(local: LocalConfig, log: Log = print, draft: str | None = None) -> ModelPair:
    """Return the cached target and its drafter, generating whichever is missing first:
    draft ``draft`` if named, else what ``local.drafter`` chooses (``local.generator.draft``
    or the EAGLE3 head of ``local.eagle3``)."""
    root = models_root(local)
    key = cache_key(local)
    final = root / key
    if draft is None and local.drafter == EAGLE3_DRAFTER:
        name, drafter_path = "eagle3 head", head_path(local)

        def make(scratch: Path) -> dict[str, Any]:
            return _generate_head(local, final, scratch, log)
    else:
        name = _draft_name(local, draft)
        drafter_path = _draft_path(local, name)

        def make(scratch: Path) -> dict[str, Any]:
            return _generate_draft(local, name, final, scratch, log)

    with _locked(root / f"{key}.lock"):
        _ensure_target(local, final, key, log)
        if (final / drafter_path / MANIFEST).is_file():
            log(f"models: reusing {_label(name)} in {final / drafter_path}")
        else:
            verb = "training" if name.startswith("eagle3") else "distilling"
            log(f"models: {verb} {_label(name)} into {final / drafter_path} (cached)")
            with _scratch(final / drafter_path) as scratch, _threads(local):
                drafter_manifest = make(scratch)
                (scratch / MANIFEST).write_text(
                    json.dumps(drafter_manifest, indent=2, sort_keys=True)
                )
        manifest = json.loads((final / MANIFEST).read_text())
        manifest["draft"] = json.loads((final / drafter_path / MANIFEST).read_text())
        # The served pair at a glance (what local_run.json and the report print).
        manifest["parameter_counts"] = {
            TARGET: manifest["target"]["served_parameters"],
            DRAFT: manifest["draft"]["served_parameters"],
        }
        manifest["evaluation"] = manifest["draft"]["evaluation"]
        manifest["weights_made_heavy"] = heavy_weights_note(manifest["target"])
        return ModelPair(final, manifest, drafter_path)


def _label(name: str) -> str:
    return name if name.startswith("eagle3") else f"draft {name!r}"


def heavy_weights_note(target: dict[str, Any]) -> dict[str, Any]:
    """What every report of the local run must say about the target (its header field)."""
    trained, served = target["trained_parameters"], target["served_parameters"]
    padded = served > trained
    return {
        "padded": padded,
        "trained_parameters": trained,
        "served_parameters": served,
        "note": (
            f"The served target is a {trained / 1e6:.2f}M-parameter trained model made heavy "
            f"without changing its function: padded to {served / 1e6:.1f}M parameters with "
            "weights whose output projections are zero (same logits, max difference "
            f"{target['padding_max_logit_diff']:.1e}), so each decode step reads "
            f"{target['weight_bytes_per_step'] / 2**20:.0f} MiB of weights like a large model."
            if padded
            else f"The served target is the {trained / 1e6:.2f}M-parameter trained model, "
            "unpadded: its steps are dominated by vLLM's fixed overhead, not weight reads."
        ),
    }


def describe_pair(pair: ModelPair) -> str:
    """The served pair in one sentence, for report headers: generated miniatures, and how
    the target was made heavy."""
    draft = pair.manifest["draft"]
    name = draft["settings"]["name"]
    share = draft["weight_share_of_target"]
    if draft.get("kind") == EAGLE3_DRAFTER:
        return (
            f"generated miniature models, not the configured checkpoints. "
            f"{pair.manifest['weights_made_heavy']['note']} Drafter: a one-layer EAGLE3 head "
            f"on the target's hidden states (layers {draft['aux_layer_ids']}), "
            f"{draft['parameters'] / 1e6:.2f}M parameters, {share:.1%} of the target's weight "
            "reads per draft pass."
        )
    return (
        f"generated miniature models, not the configured checkpoints. "
        f"{pair.manifest['weights_made_heavy']['note']} Draft {name!r}: "
        f"{draft['parameters'] / 1e6:.2f}M trained parameters, served at {share:.1%} of the "
        "target's weight reads per step."
    )


def _train_tokenizer(texts: list[str], vocab_size: int) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    # Single digits (as Qwen's tokenizer does) make counting learnable by a tiny model.
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token=IM_END,
        pad_token=ENDOFTEXT,
        chat_template=CHAT_TEMPLATE,
        model_max_length=1 << 30,
    )


def _build_model(shape: TinyModelShape, tokenizer: Any, max_positions: int, seed: int) -> Any:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size,
        num_hidden_layers=shape.num_layers,
        num_attention_heads=shape.num_heads,
        num_key_value_heads=shape.num_kv_heads,
        head_dim=shape.head_dim,
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.convert_tokens_to_ids(ENDOFTEXT),
        eos_token_id=tokenizer.convert_tokens_to_ids(IM_END),
        pad_token_id=tokenizer.convert_tokens_to_ids(ENDOFTEXT),
    )
    torch.manual_seed(seed)
    return Qwen3ForCausalLM(config).float()


def _token_stream(tokenizer: Any, documents: list[str]) -> Any:
    import torch

    separator = tokenizer.convert_tokens_to_ids(ENDOFTEXT)
    ids: list[int] = []
    for encoded in tokenizer(documents, add_special_tokens=False)["input_ids"]:
        ids.extend(encoded)
        ids.append(separator)
    return torch.tensor(ids, dtype=torch.long)


def optimize(
    model: Any,
    batch_loss: Callable[[Any], Any],
    steps: int,
    learning_rate: float,
    seed: int,
    log: Log,
    name: str,
) -> list[float]:
    """The one training loop of every generated model: AdamW with linear warm-up and cosine
    decay to 10 %, gradients clipped at 1, progress logged five times. ``batch_loss(sampler)``
    draws its batch from ``sampler`` (seeded with ``seed``) and returns the loss."""
    import torch

    if steps == 0:
        return []
    sys.audit(TRAIN_EVENT, name, steps)
    sampler = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=0.01)
    warmup = max(1, steps // 10)

    def schedule(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return 0.1 + 0.45 * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))

    lr_schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    model.train()
    losses: list[float] = []
    started = time.monotonic()
    for step in range(steps):
        enter_phase(f"training {name}: step {step + 1}/{steps}")
        loss = batch_loss(sampler)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        lr_schedule.step()
        losses.append(round(loss.item(), 4))
        if (step + 1) % max(1, steps // 5) == 0 or step + 1 == steps:
            log(
                f"models: {name} step {step + 1}/{steps} loss {loss.item():.3f} "
                f"({time.monotonic() - started:.0f}s)"
            )
    model.eval()
    return losses


def _train(
    model: Any,
    streams: list[Any],
    generator: ModelGeneratorConfig,
    steps: int,
    seed: int,
    log: Log,
    name: str,
) -> list[float]:
    """AdamW on random windows; batch row i is cut from ``streams[i % len(streams)]``."""
    import torch

    length = generator.sequence_length

    def batch_loss(sampler: Any) -> Any:
        rows = []
        for row in range(generator.batch_size):
            stream = streams[row % len(streams)]
            start = int(torch.randint(0, len(stream) - length - 1, (1,), generator=sampler))
            rows.append(stream[start : start + length])
        batch = torch.stack(rows)
        return model(input_ids=batch, labels=batch).loss

    return optimize(model, batch_loss, steps, generator.learning_rate, seed, log, name)


def _evaluate(
    target: Any, draft: Any, tokenizer: Any, documents: list[tuple[str, str]]
) -> dict[str, Any]:
    """Per-token loss of each model and how often the draft's greedy token equals the
    target's (teacher forced): an offline estimate of the acceptance rate."""
    import torch

    totals: dict[str, dict[str, float]] = {}
    with torch.no_grad():
        for kind, text in documents:
            ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
            if ids.shape[1] < 2:
                continue
            ids = ids[:, :256]
            t_out = target(input_ids=ids, labels=ids)
            d_out = draft(input_ids=ids, labels=ids)
            agree = (t_out.logits[0, :-1].argmax(-1) == d_out.logits[0, :-1].argmax(-1)).float()
            entry = totals.setdefault(
                kind, {"tokens": 0, "target_loss": 0.0, "draft_loss": 0.0, "agree": 0.0}
            )
            n = ids.shape[1] - 1
            entry["tokens"] += n
            entry["target_loss"] += t_out.loss.item() * n
            entry["draft_loss"] += d_out.loss.item() * n
            entry["agree"] += agree.sum().item()
    return {
        kind: {
            "tokens": int(e["tokens"]),
            "target_loss": round(e["target_loss"] / e["tokens"], 3),
            "draft_loss": round(e["draft_loss"] / e["tokens"], 3),
            "greedy_agreement": round(e["agree"] / e["tokens"], 3),
        }
        for kind, e in sorted(totals.items())
    }


def _pad(
    trained: Any,
    shape: TinyModelShape,
    width: int,
    extra_layers: int,
    tokenizer: Any,
    max_positions: int,
    seed: int,
) -> Any:
    """``trained`` inside a wider (MLP ``width``), deeper (``extra_layers``) Qwen3 whose extra
    weights are random (so they are real reads) but never reach the output (their output
    projections are zero): the same function at a larger model's cost per step."""
    import torch

    layers = shape.num_layers + extra_layers
    wide = shape.model_copy(
        update={"intermediate_size": max(width, shape.intermediate_size), "num_layers": layers}
    )
    padded = _build_model(wide, tokenizer, max_positions, seed)
    weights = padded.state_dict()
    with torch.no_grad():
        for name, small in trained.state_dict().items():
            weights[name][tuple(slice(0, n) for n in small.shape)].copy_(small)
            if name.endswith("mlp.down_proj.weight"):
                weights[name][:, small.shape[1] :].zero_()  # the extra columns add nothing
        for layer in range(shape.num_layers, layers):  # extra layers: the residual passes through
            weights[f"model.layers.{layer}.self_attn.o_proj.weight"].zero_()
            weights[f"model.layers.{layer}.mlp.down_proj.weight"].zero_()
    padded.eval()
    return padded


def _max_logit_diff(trained: Any, padded: Any, tokenizer: Any, texts: list[str]) -> float:
    import torch

    worst = 0.0
    with torch.no_grad():
        for text in texts:
            ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
            ids = ids[:, :128]
            diff = (trained(input_ids=ids).logits - padded(input_ids=ids).logits).abs().max()
            worst = max(worst, float(diff))
    return worst


def _count(model: Any) -> int:
    return sum(p.numel() for p in model.parameters())


def _generation_config(tokenizer: Any) -> Any:
    from transformers import GenerationConfig

    return GenerationConfig(
        bos_token_id=tokenizer.convert_tokens_to_ids(ENDOFTEXT),
        eos_token_id=[
            tokenizer.convert_tokens_to_ids(IM_END),
            tokenizer.convert_tokens_to_ids(ENDOFTEXT),
        ],
        pad_token_id=tokenizer.convert_tokens_to_ids(ENDOFTEXT),
    )


def _save(model: Any, tokenizer: Any, out: Path) -> None:
    model.generation_config = _generation_config(tokenizer)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)


def _generate_target(local: LocalConfig, out: Path, log: Log) -> dict[str, Any]:
    _offline()
    import torch

    generator = local.generator
    seed = local.model_seed
    started = time.monotonic()
    random.seed(seed)
    torch.manual_seed(seed)
    prose = corpus.stdlib_prose()
    documents = [text for _, text in corpus.documents(seed, generator.documents, prose)]
    tokenizer = _train_tokenizer(documents, generator.vocab_size)
    stream = _token_stream(tokenizer, documents)
    log(f"models: tokenizer {len(tokenizer)} tokens, corpus {len(stream)} tokens")
    trained = _build_model(generator.target, tokenizer, local.max_model_len, seed)
    losses = _train(trained, [stream], generator, generator.train_steps, seed, log, TARGET)
    padding = generator.padding
    padded = _pad(
        trained,
        generator.target,
        padding.intermediate_size,
        padding.extra_layers,
        tokenizer,
        local.max_model_len,
        seed,
    )
    held_out = [text for _, text in corpus.documents(seed + 1_000_003, 8, prose)]
    logit_diff = _max_logit_diff(trained, padded, tokenizer, held_out)
    if logit_diff > 1e-3:  # the padding must not change what the target says
        raise RuntimeError(f"padding changed the target's logits (max difference {logit_diff})")
    _save(trained, tokenizer, out / TRAINED_TARGET)
    _save(padded, tokenizer, out / TARGET)
    elapsed = time.monotonic() - started
    served = _count(padded)
    log(
        f"models: target generated in {elapsed:.0f}s: {_count(trained):,} trained parameters, "
        f"{served:,} served ({served * FLOAT32_BYTES / 2**20:.0f} MiB of float32 weights read "
        f"per decode step), padding max logit difference {logit_diff:.1e}"
    )
    return {
        "parameters": target_parameters(local),
        "target": {
            "trained_parameters": _count(trained),
            "served_parameters": served,
            # Every weight matrix is read once per step (the tied embedding as the lm_head).
            "weight_bytes_per_step": served * FLOAT32_BYTES,
            "padding_max_logit_diff": logit_diff,
            "final_train_loss": losses[-1] if losses else None,
        },
        "generation_seconds": round(elapsed, 1),
        "torch_threads": torch.get_num_threads(),
    }


def distillation_prompts(seed: int, count: int) -> list[str]:
    """Structured chat prompts from the corpus's task generators (never the load test's),
    in the layout the load test's chat requests render to (user turn, no system)."""
    rng = random.Random(seed)
    prompts = []
    for _ in range(count):
        user, _ = rng.choice(corpus.TASKS)(rng)
        prompts.append(f"{IM_START}user\n{user}{IM_END}\n{IM_START}assistant\n")
    return prompts


def greedy_continuations(
    teacher: Any, tokenizer: Any, prompts: list[str], new_tokens: int
) -> list[list[int]]:
    """The teacher's greedy output for each prompt, ``new_tokens`` long past any end of
    turn (the load test sends ``ignore_eos``), as token ids of prompt + output."""
    import torch

    tokenizer.padding_side = "left"
    sequences: list[list[int]] = []
    with torch.no_grad():
        for first in range(0, len(prompts), DISTILL_BATCH):
            batch = tokenizer(
                prompts[first : first + DISTILL_BATCH],
                add_special_tokens=False,
                return_tensors="pt",
                padding=True,
            )
            output = teacher.generate(
                **batch,
                max_new_tokens=new_tokens,
                min_new_tokens=new_tokens,
                do_sample=False,
                pad_token_id=tokenizer.convert_tokens_to_ids(ENDOFTEXT),
                eos_token_id=None,
            )
            for row, mask in zip(output, batch["attention_mask"], strict=True):
                pad = int((mask == 0).sum())
                sequences.append(row[pad:].tolist())
    return sequences


def draft_batch_streams(
    corpus_stream: Any, continuations: Any, batch_size: int, corpus_rows: int
) -> list[Any]:
    """One stream per batch row (``_train`` cuts row i from ``streams[i]``): ``corpus_rows``
    rows of corpus, the rest of the target's greedy continuations."""
    return [corpus_stream] * corpus_rows + [continuations] * (batch_size - corpus_rows)


def _generate_draft(
    local: LocalConfig, name: str, target_root: Path, out: Path, log: Log
) -> dict[str, Any]:
    _offline()
    import torch
    from transformers import AutoTokenizer, Qwen3ForCausalLM

    generator = local.generator
    shape: DraftShape = generator.drafts[name]
    distillation = generator.distillation
    # Its own seed per name, so two drafts of one shape still differ only by name.
    seed = local.model_seed + 1 + int(hashlib.sha256(name.encode()).hexdigest()[:6], 16)
    started = time.monotonic()
    random.seed(seed)
    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(target_root / TRAINED_TARGET)
    teacher = Qwen3ForCausalLM.from_pretrained(target_root / TRAINED_TARGET).float().eval()
    prose = corpus.stdlib_prose()
    documents = [text for _, text in corpus.documents(local.model_seed, generator.documents, prose)]
    corpus_stream = _token_stream(tokenizer, documents)
    streams = [corpus_stream]
    if distillation.prompts:
        prompts = distillation_prompts(seed, distillation.prompts)
        sequences = greedy_continuations(teacher, tokenizer, prompts, distillation.new_tokens)
        separator = tokenizer.convert_tokens_to_ids(ENDOFTEXT)
        continuations = torch.tensor([t for seq in sequences for t in (*seq, separator)])
        streams = draft_batch_streams(
            corpus_stream, continuations, generator.batch_size, distillation.corpus_rows
        )
        log(
            f"models: {len(sequences)} greedy target continuations for draft {name!r} "
            f"({time.monotonic() - started:.0f}s)"
        )
    draft = _build_model(shape, tokenizer, local.max_model_len, seed)
    steps = distillation.train_steps
    losses = _train(draft, streams, generator, steps, seed, log, f"draft {name!r}")
    held_out = list(corpus.documents(local.model_seed + 1_000_003, EVAL_DOCUMENTS, prose))
    # Also the target's own greedy answers to unseen structured prompts: what vLLM verifies.
    answers = greedy_continuations(
        teacher, tokenizer, distillation_prompts(seed + 1, EVAL_PROMPTS), distillation.new_tokens
    )
    held_out += [(GREEDY_KIND, str(tokenizer.decode(ids))) for ids in answers]
    evaluation = _evaluate(teacher, draft, tokenizer, held_out)
    # Padded like the target, to its share of the target's weight reads per step.
    target_manifest = json.loads((target_root / MANIFEST).read_text())["target"]
    wanted = shape.weight_share * target_manifest["served_parameters"] - _count(draft)
    per_column = 3 * shape.hidden_size * shape.num_layers  # gate, up and down rows/columns
    width = shape.intermediate_size + max(0, math.ceil(wanted / per_column))
    served = _pad(draft, shape, width, 0, tokenizer, local.max_model_len, seed)
    texts = [text for _, text in held_out[:8]]
    logit_diff = _max_logit_diff(draft, served, tokenizer, texts)
    if logit_diff > 1e-3:
        raise RuntimeError(f"padding changed draft {name!r}'s logits (max difference {logit_diff})")
    served.generation_config = _generation_config(tokenizer)
    served.save_pretrained(out, safe_serialization=True)
    # The target's tokenizer files, byte for byte: vLLM checks the pair shares one vocabulary.
    for source in (target_root / TARGET).iterdir():
        if source.is_file() and source.name not in MODEL_FILES:
            shutil.copyfile(source, out / source.name)
    elapsed = time.monotonic() - started
    log(f"models: draft {name!r} in {elapsed:.0f}s; offline evaluation {json.dumps(evaluation)}")
    return {
        "settings": draft_parameters(local, name),
        "parameters": _count(draft),
        "served_parameters": _count(served),
        "weight_share_of_target": round(_count(served) / target_manifest["served_parameters"], 4),
        "padding_max_logit_diff": logit_diff,
        "final_train_loss": losses[-1] if losses else None,
        "evaluation": evaluation,
        "generation_seconds": round(elapsed, 1),
        "torch_threads": torch.get_num_threads(),
    }


def _generate_head(local: LocalConfig, target_root: Path, out: Path, log: Log) -> dict[str, Any]:
    """The EAGLE3 head (``local_run/eagle3.py``) trained on the trained target's hidden
    states over its greedy continuations of structured chat prompts (as the drafts learn
    them), scored offline on held-out text and the target's answers to unseen prompts."""
    _offline()
    import torch
    from transformers import AutoTokenizer, Qwen3ForCausalLM

    settings = local.eagle3
    seed = local.model_seed + 3 + int(hashlib.sha256(b"eagle3").hexdigest()[:6], 16)
    started = time.monotonic()
    random.seed(seed)
    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(target_root / TRAINED_TARGET)
    teacher = Qwen3ForCausalLM.from_pretrained(target_root / TRAINED_TARGET).float().eval()
    teacher.requires_grad_(False)
    prompts = distillation_prompts(seed, settings.prompts)
    sequences = greedy_continuations(teacher, tokenizer, prompts, settings.new_tokens)
    separator = tokenizer.convert_tokens_to_ids(ENDOFTEXT)
    stream = torch.tensor([t for seq in sequences for t in (*seq, separator)])
    log(
        f"models: {len(sequences)} greedy target continuations for the eagle3 head "
        f"({time.monotonic() - started:.0f}s)"
    )
    target_config = json.loads((target_root / TRAINED_TARGET / "config.json").read_text())
    config = eagle3.head_config(target_config, local)
    torch.manual_seed(seed)
    head = eagle3.build_head(config)
    with torch.no_grad():  # start from the target's output layer
        head.lm_head.weight.copy_(teacher.lm_head.weight)
    states = eagle3.TargetStates(teacher, config["eagle_aux_hidden_state_layer_ids"])
    losses = optimize(
        head,
        eagle3.batch_loss(head, states, stream, local),
        settings.train_steps,
        settings.learning_rate,
        seed,
        log,
        "eagle3 head",
    )
    prose = corpus.stdlib_prose()
    held_out = list(corpus.documents(local.model_seed + 1_000_003, eagle3.EVAL_DOCUMENTS, prose))
    answers = greedy_continuations(
        teacher, tokenizer, distillation_prompts(seed + 1, eagle3.EVAL_PROMPTS), settings.new_tokens
    )
    held_out += [(GREEDY_KIND, str(tokenizer.decode(ids))) for ids in answers]
    evaluation = eagle3.evaluate_head(head, states, tokenizer, held_out)
    # The served figure: speculation replayed as vLLM runs it (it matches vLLM's counters on
    # the same requests, test_local_eagle3_integration.py), on the target's answers.
    replay = eagle3.replay_acceptance(
        head,
        states,
        [(ids, len(ids) - settings.new_tokens) for ids in answers],
        eagle3.EVAL_POSITIONS,
    )
    parameters = eagle3.save_head(head, config, out)
    # The target's tokenizer files, byte for byte: runtime.validate compares them.
    for source in (target_root / TARGET).iterdir():
        if source.is_file() and source.name not in MODEL_FILES:
            shutil.copyfile(source, out / source.name)
    target_manifest = json.loads((target_root / MANIFEST).read_text())["target"]
    elapsed = time.monotonic() - started
    log(
        f"models: eagle3 head in {elapsed:.0f}s; offline evaluation {json.dumps(evaluation)}; "
        f"speculation replay {json.dumps(replay)}"
    )
    return {
        "settings": {"name": EAGLE3_DRAFTER, **head_parameters(local)},
        "kind": EAGLE3_DRAFTER,
        "parameters": parameters,
        "served_parameters": parameters,
        # Read per draft pass; the embedding is the target's (a lookup, not a full read).
        "weight_share_of_target": round(parameters / target_manifest["served_parameters"], 4),
        "aux_layer_ids": config["eagle_aux_hidden_state_layer_ids"],
        "final_train_loss": losses[-1] if losses else None,
        "evaluation": evaluation,
        "speculation_replay": {GREEDY_KIND: replay},
        "generation_seconds": round(elapsed, 1),
        "torch_threads": torch.get_num_threads(),
    }
