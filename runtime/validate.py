"""Checks on a serving spec, phrased as what to change.

Two kinds: ``validate_spec`` needs nothing but the spec (run by ``render``, so a bad
spec never becomes a command line), ``check_draft_compatibility`` reads the target's
and the draft's tokenizer/config files when they are reachable (run by ``serve`` and
the local run before starting vLLM). Standard library only.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from runtime.spec import Generation, ServingSpec

MIN_SPECULATIVE_TOKENS = 1
MAX_SPECULATIVE_TOKENS = 15
# vllm-neuron (vLLM >= 0.11) only fuses EAGLE-style drafts; a plain model needs the 0.9 fork.
PLUGIN_SPECULATIVE_METHODS = ("eagle", "eagle3")
LOCAL_SPECULATIVE_METHODS = ("draft_model",)
NEURON_GENERATIONS = (Generation.NEURON_FORK, Generation.NEURON_PLUGIN)
# Files whose content defines the token <-> id mapping; equal content = same tokenizer.
TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "merges.txt", "tokenizer.model")


class SpecError(ValueError):
    """A serving spec that cannot be served; the message says what to change."""


def _check_draft_fields(spec: ServingSpec) -> None:
    k = spec.num_speculative_tokens
    if spec.draft_model is None:
        if k is not None or spec.speculative_method is not None:
            raise SpecError(
                f"{spec.service_name}: num_speculative_tokens/speculative_method are set but "
                "draft_model is not; set draft_model for the speculative arm or clear both "
                "for the baseline"
            )
        return
    if k is None:
        raise SpecError(
            f"{spec.service_name}: draft_model is set but num_speculative_tokens is not; "
            f"set k between {MIN_SPECULATIVE_TOKENS} and {MAX_SPECULATIVE_TOKENS}"
        )
    if not MIN_SPECULATIVE_TOKENS <= k <= MAX_SPECULATIVE_TOKENS:
        raise SpecError(
            f"{spec.service_name}: num_speculative_tokens is {k}; choose k between "
            f"{MIN_SPECULATIVE_TOKENS} and {MAX_SPECULATIVE_TOKENS} "
            "(the experiment found 7 best for a Qwen3-1.7B draft)"
        )
    if spec.draft_model == spec.target_model:
        raise SpecError(
            f"{spec.service_name}: draft_model is the target itself ({spec.draft_model}); "
            "name a smaller model with the same tokenizer"
        )
    method = spec.speculative_method
    if spec.generation == Generation.NEURON_PLUGIN and method not in PLUGIN_SPECULATIVE_METHODS:
        raise SpecError(
            f"{spec.service_name}: generation 'neuron-plugin' only fuses EAGLE/EAGLE3 drafts, "
            f"but speculative_method is {method!r} (a plain draft model such as "
            f"{spec.draft_model}); use an EAGLE draft with speculative_method 'eagle' or "
            "'eagle3', or generation 'neuron-fork' for a plain draft model"
        )
    if spec.generation == Generation.LOCAL_CPU and method not in (None, *LOCAL_SPECULATIVE_METHODS):
        raise SpecError(
            f"{spec.service_name}: the local CPU profile runs a plain draft model; "
            f"speculative_method must be 'draft_model', not {method!r}"
        )


def _check_neuron_fields(spec: ServingSpec) -> None:
    name = spec.service_name
    if spec.logical_neuron_cores not in (1, 2):
        raise SpecError(
            f"{name}: logical_neuron_cores must be 1 or 2 on trn2 (got "
            f"{spec.logical_neuron_cores}); it must match the LNC the artifacts were compiled with"
        )
    claimed = spec.claimed_logical_cores
    if claimed is None:
        raise SpecError(
            f"{name}: claimed_logical_cores is missing; build the spec with "
            "ExperimentConfig.serving_spec() so it carries what the DRA claim provides"
        )
    if spec.tensor_parallel_size != claimed:
        raise SpecError(
            f"{name}: tensor_parallel_size {spec.tensor_parallel_size} with LNC "
            f"{spec.logical_neuron_cores} does not use the {claimed} logical NeuronCores the "
            f"resource claim provides; set tensor_parallel_size to {claimed} or change the "
            "claimed devices / LNC"
        )
    if not spec.compiled_artifacts_path:
        raise SpecError(
            f"{name}: compiled_artifacts_path is empty; Neuron serving loads (or writes) its "
            "compiled model there, set it to a directory on the model store"
        )
    compiled = spec.compiled_max_model_len
    if compiled is not None and spec.max_model_len > compiled:
        raise SpecError(
            f"{name}: max_model_len {spec.max_model_len} exceeds the compiled length {compiled}; "
            "lower max_model_len or recompile with a larger compiled_max_model_len"
        )


def validate_spec(spec: ServingSpec) -> None:
    """Raise SpecError if the spec cannot be rendered into a working command."""
    if not 1 <= spec.port <= 65535:
        raise SpecError(f"{spec.service_name}: port {spec.port} is not a TCP port (1-65535)")
    for field in ("max_num_seqs", "max_model_len", "block_size", "tensor_parallel_size"):
        if getattr(spec, field) < 1:
            raise SpecError(f"{spec.service_name}: {field} must be at least 1")
    _check_draft_fields(spec)
    if spec.generation in NEURON_GENERATIONS:
        _check_neuron_fields(spec)
    elif spec.tensor_parallel_size != 1:
        raise SpecError(
            f"{spec.service_name}: the local CPU profile runs one process; set "
            f"tensor_parallel_size to 1 (got {spec.tensor_parallel_size})"
        )


def _read_json(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _vocab_size(model_dir: Path) -> int | None:
    config = _read_json(model_dir / "config.json")
    if config is None:
        return None
    size = config.get("vocab_size", config.get("text_config", {}).get("vocab_size"))
    return size if isinstance(size, int) else None


def _tokenizer_digest(model_dir: Path) -> tuple[str, str] | None:
    """(file name, sha256) of the first tokenizer-defining file found, or None."""
    for name in TOKENIZER_FILES:
        file = model_dir / name
        if file.is_file():
            return name, hashlib.sha256(file.read_bytes()).hexdigest()
    return None


def check_draft_compatibility(target_dir: str | Path, draft_dir: str | Path) -> list[str]:
    """Raise SpecError if target and draft visibly differ in vocabulary or tokenizer.

    Speculation verifies draft token ids with the target, so both must map text to the
    same ids. Returns notes on what could not be checked (files not reachable), so the
    caller can print them; an unreachable file is not an error (the model may be a hub
    id resolved later by vLLM).
    """
    target, draft = Path(target_dir), Path(draft_dir)
    notes: list[str] = []
    target_vocab, draft_vocab = _vocab_size(target), _vocab_size(draft)
    if target_vocab is None or draft_vocab is None:
        notes.append(f"vocab_size not checked: config.json unreadable in {target} or {draft}")
    elif target_vocab != draft_vocab:
        raise SpecError(
            f"draft {draft} has vocab_size {draft_vocab} but target {target} has {target_vocab}; "
            "speculation needs the same vocabulary: pick a draft from the same model family "
            "(e.g. Qwen3-1.7B for Qwen3-32B)"
        )
    target_tok, draft_tok = _tokenizer_digest(target), _tokenizer_digest(draft)
    if target_tok is None or draft_tok is None:
        notes.append(f"tokenizer not checked: no {TOKENIZER_FILES} file in {target} or {draft}")
    elif target_tok != draft_tok:
        raise SpecError(
            f"draft {draft} ({draft_tok[0]}) and target {target} ({target_tok[0]}) have "
            "different tokenizers; speculation needs the same tokenizer: pick a draft from "
            "the same model family, or copy the target's tokenizer files if they are "
            "known to be equivalent"
        )
    return notes
