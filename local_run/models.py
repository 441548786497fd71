"""Generate (or reuse) the tiny Qwen3-architecture target/draft pair of the local run.

Hubs are unreachable, so the project makes its own models: a byte-level BPE
tokenizer trained on ``local_run.corpus``, a target and a smaller draft with the
Qwen3 architecture (so vLLM loads them with its real Qwen3 code), both trained for a
few hundred CPU steps on the same text so that the draft agrees with the target
often on structured prompts and less on open-ended ones. Everything is a function
of ``config.local.model_seed`` and ``config.local.generator``; the result is cached
under ``config.local.models_dir/<hash of those parameters>``.
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
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from experiment.config import LocalConfig, ModelGeneratorConfig, TinyModelShape
from experiment.loading import PROJECT_ROOT
from local_run import corpus

# Bump when the generator's code changes what it produces: a new version is a new cache key.
GENERATOR_VERSION = 1
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
EVAL_DOCUMENTS = 200

Log = Callable[[str], None]


@dataclass(frozen=True)
class ModelPair:
    """A generated pair on disk; ``manifest`` records how it was made and how it scored."""

    root: Path
    manifest: dict[str, Any]

    @property
    def target_dir(self) -> Path:
        return self.root / TARGET

    @property
    def draft_dir(self) -> Path:
        return self.root / DRAFT


def generator_parameters(local: LocalConfig) -> dict[str, Any]:
    """Everything the generated files depend on (the cache key is a hash of this)."""
    return {
        "generator_version": GENERATOR_VERSION,
        "seed": local.model_seed,
        "max_position_embeddings": local.max_model_len,
        "generator": local.generator.model_dump(mode="json"),
        "python": platform.python_version(),  # the prose comes from this Python's stdlib
    }


def cache_key(local: LocalConfig) -> str:
    blob = json.dumps(generator_parameters(local), sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def models_root(local: LocalConfig) -> Path:
    path = Path(local.models_dir)
    return path if path.is_absolute() else PROJECT_ROOT / path


def _offline() -> None:
    # Nothing here may reach a hub; fail fast instead of hanging on a network call.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    # Two runs (or test sessions) generating the same pair wait for each other.
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def ensure_models(local: LocalConfig, log: Log = print) -> ModelPair:
    """Return the cached pair for this configuration, generating it first if needed."""
    root = models_root(local)
    key = cache_key(local)
    final = root / key
    with _locked(root / f"{key}.lock"):
        if (final / MANIFEST).is_file():
            log(f"models: reusing {final}")
            return ModelPair(final, json.loads((final / MANIFEST).read_text()))
        log(f"models: generating the tiny Qwen3 pair into {final} (cached for next runs)")
        # Build in a scratch directory and rename: an interrupted run leaves no half pair.
        scratch = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=root))
        try:
            manifest = _generate(local, scratch, log)
            manifest["cache_key"] = key
            (scratch / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True))
            scratch.rename(final)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        return ModelPair(final, manifest)


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


def _train(
    model: Any, stream: Any, generator: ModelGeneratorConfig, seed: int, log: Log, name: str
) -> list[float]:
    import torch

    steps, length = generator.train_steps, generator.sequence_length
    if steps == 0:
        return []
    sampler = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=generator.learning_rate, weight_decay=0.01)
    warmup = max(1, steps // 10)

    def schedule(step: int) -> float:  # linear warm-up, cosine decay to 10 %
        if step < warmup:
            return (step + 1) / warmup
        return 0.1 + 0.45 * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))

    lr_schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    model.train()
    losses: list[float] = []
    started = time.monotonic()
    for step in range(steps):
        starts = torch.randint(
            0, len(stream) - length - 1, (generator.batch_size,), generator=sampler
        )
        batch = torch.stack([stream[s : s + length] for s in starts.tolist()])
        loss = model(input_ids=batch, labels=batch).loss
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


def _generate(local: LocalConfig, out: Path, log: Log) -> dict[str, Any]:
    _offline()
    import torch
    from transformers import GenerationConfig

    generator = local.generator
    seed = local.model_seed
    started = time.monotonic()
    random.seed(seed)
    torch.manual_seed(seed)
    prose = corpus.stdlib_prose()
    documents = [text for _, text in corpus.documents(seed, generator.documents, prose)]
    held_out = list(corpus.documents(seed + 1_000_003, EVAL_DOCUMENTS, prose))
    tokenizer = _train_tokenizer(documents, generator.vocab_size)
    stream = _token_stream(tokenizer, documents)
    log(f"models: tokenizer {len(tokenizer)} tokens, corpus {len(stream)} tokens")
    models = {}
    losses = {}
    for index, (name, shape) in enumerate(((TARGET, generator.target), (DRAFT, generator.draft))):
        model = _build_model(shape, tokenizer, local.max_model_len, seed + index)
        losses[name] = _train(model, stream, generator, seed + index, log, name)
        models[name] = model
    evaluation = _evaluate(models[TARGET], models[DRAFT], tokenizer, held_out)
    generation = GenerationConfig(
        bos_token_id=tokenizer.convert_tokens_to_ids(ENDOFTEXT),
        eos_token_id=[
            tokenizer.convert_tokens_to_ids(IM_END),
            tokenizer.convert_tokens_to_ids(ENDOFTEXT),
        ],
        pad_token_id=tokenizer.convert_tokens_to_ids(ENDOFTEXT),
    )
    for name, model in models.items():
        model.generation_config = generation
        model.save_pretrained(out / name, safe_serialization=True)
        tokenizer.save_pretrained(out / name)
    elapsed = time.monotonic() - started
    log(f"models: generated in {elapsed:.0f}s; offline evaluation {json.dumps(evaluation)}")
    return {
        "parameters": generator_parameters(local),
        "parameter_counts": {n: sum(p.numel() for p in m.parameters()) for n, m in models.items()},
        "final_train_loss": {n: (v[-1] if v else None) for n, v in losses.items()},
        "evaluation": evaluation,
        "generation_seconds": round(elapsed, 1),
        "torch_threads": torch.get_num_threads(),
    }
