"""A tiny local tokenizer for ``vllm bench serve`` (it needs one; the hub is off limits).

Word-level over a fixed synthetic vocabulary, saved as ``tokenizer.json`` +
``tokenizer_config.json`` so ``transformers.AutoTokenizer`` (what vLLM loads) opens it as a
``PreTrainedTokenizerFast``. The scripted server ignores prompt content, so only the
prompt/output lengths matter.
"""

from __future__ import annotations

import json
from pathlib import Path

VOCAB_WORDS = 1024
_SPECIAL = ["<unk>", "<pad>", "<eos>"]


def build_tokenizer(directory: Path) -> Path:
    """Write the tokenizer into ``directory`` (idempotent) and return it."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    directory = Path(directory)
    if (directory / "tokenizer.json").is_file() and (directory / "tokenizer_config.json").is_file():
        return directory
    directory.mkdir(parents=True, exist_ok=True)
    vocab = {token: number for number, token in enumerate(_SPECIAL)}
    for word in range(VOCAB_WORDS):
        vocab[f"w{word}"] = len(vocab)
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    tokenizer.save(str(directory / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": "<unk>",
        "pad_token": "<pad>",
        "eos_token": "<eos>",
        "model_max_length": 4096,
    }
    (directory / "tokenizer_config.json").write_text(json.dumps(config, indent=1))
    return directory
