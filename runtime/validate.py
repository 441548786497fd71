"""Checks on a serving spec, phrased as what to change.

Two kinds: ``validate_spec`` needs nothing but the spec (run by ``render``, so a bad
spec never becomes a command line), ``check_draft_compatibility`` reads the target's
and the draft's tokenizer/config files when they are reachable (run by ``serve`` and
the local run before starting vLLM). Standard library only.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path

from runtime.spec import Generation, ServingSpec

MIN_SPECULATIVE_TOKENS = 1
MAX_SPECULATIVE_TOKENS = 15
# The speculation methods vllm-neuron 1.x accepts: its proposers assert
# `speculative_config.method == expected_method`, "eagle3" (EagleProposer) or "dflash"
# (DFlashProposer, SDK 2.33) -- vllm-project/vllm-neuron:vllm_neuron/vllm/spec_decode/eagle.py,
# vllm_neuron/vllm/spec_decode/dflash.py. No plain draft-model (fused) mode: a plain model such
# as Qwen3-1.7B needs the 0.9 fork. 0.1.x-0.2.x ("eagle", NxDI-backed) are not supported.
PLUGIN_SPECULATIVE_METHODS = ("eagle3", "dflash")
# What a draft's published name says it is (RedHatAI/*.eagle3, yuhuili/EAGLE3-*,
# z-lab/*-DFlash-*); a plain model's name says neither.
PLUGIN_DRAFT_NAME_MARKS = {"eagle3": "eagle", "dflash": "dflash"}
_DRAFT_KIND = {"eagle3": "an EAGLE3", "dflash": "a DFlash"}
# DFlash on Neuron: tensor_parallel_size 4 or 8 only, prefix caching and chunked prefill off,
# k = the drafter's trained block_size - 1 (DFlashProposer.__init__, dflash.py above).
DFLASH_TENSOR_PARALLEL_SIZES = (4, 8)
# vllm 0.32 on CPU: a separate draft model, or an EAGLE3 head (Eagle3Qwen3ForCausalLM).
LOCAL_SPECULATIVE_METHODS = ("draft_model", "eagle3")
NEURON_GENERATIONS = (
    Generation.NEURON_FORK,
    Generation.NEURON_PLUGIN,
)  # vLLM's dynamic speculative decoding ("Dynamic SD", vllm-project/vllm PR #32374): the
# speculative config's num_speculative_tokens_per_batch_size, inclusive [first, last, k]
# batch-size ranges, k = 0 meaning no drafts. Checked against the installed vllm 0.32:
# vllm/config/speculative.py (SpeculativeConfig.num_speculative_tokens_per_batch_size:
# list[tuple[int, int, int]] | None; num_speculative_tokens stays the startup maximum) and
# vllm/v1/spec_decode/dynamic/utils.py (validate_and_normalize_dynamic_sd_schedule: ranges
# positive, first <= last, k >= 0, sorted silently, non-overlapping, the first starting at 1;
# build_dynamic_sd_schedule_lookup: each k clamped to num_speculative_tokens without a word,
# gaps and batch sizes past the last range carry the previous k, ranges past max_num_seqs
# dropped), applied per step by vllm/v1/core/sched/scheduler.py (dynamic_sd_lookup[number of
# scheduled requests]). The rules below refuse what vLLM would silently reorder, clamp, carry
# or drop.
SCHEDULE_KEY = "num_speculative_tokens_per_batch_size"
SCHEDULE_REFUSED: dict[Generation, str] = {
    Generation.NEURON_FORK: (
        "the 0.9 fork (V0 engine, fused speculation) has no per-batch-size k: k is compiled "
        "into its fused graph, and num_speculative_tokens_per_batch_size only came to vLLM's V1 "
        "scheduler with Dynamic SD (vllm-project/vllm PR #32374, 2026)"
    ),
    Generation.NEURON_PLUGIN: (
        "vllm-neuron 1.x drafts a fixed k: its EagleProposer compiles one fused draft graph "
        "for num_speculative_tokens and its propose() takes no per-step k "
        "(vllm-project/vllm-neuron:vllm_neuron/vllm/spec_decode/eagle.py), and DFlash proposes "
        "its trained block (dflash.py), so the k vLLM's scheduler would pick per batch size "
        "never reaches the device"
    ),
}

LOGICAL_NEURON_CORE_VALUES = (1, 2)
# Files whose content defines the token <-> id mapping; equal content = same tokenizer.
TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "merges.txt", "tokenizer.model")


class SpecError(ValueError):
    """A serving spec that cannot be served; the message says what to change.

    ``field`` names the setting to change (relative: ``num_speculative_tokens``), so the
    configuration can report it under its own path (``serving.num_speculative_tokens``).
    """

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


# The rules below are the one source of the serving rules: `validate_spec` applies them to a
# spec in the container, experiment/config.py to the configuration at synth time. `name`
# turns a field into what the user sees: `serving.num_speculative_tokens` in the config,
# `qwen-sd-vllm: num_speculative_tokens` for a spec.
Namer = Callable[[str], str]


def _plain(field: str) -> str:
    return field


def check_num_speculative_tokens(k: int, name: Namer = _plain) -> None:
    if not MIN_SPECULATIVE_TOKENS <= k <= MAX_SPECULATIVE_TOKENS:
        raise SpecError(
            f"{name('num_speculative_tokens')} is {k}; choose k between "
            f"{MIN_SPECULATIVE_TOKENS} and {MAX_SPECULATIVE_TOKENS} "
            "(the experiment found 7 best for a Qwen3-1.7B draft)",
            "num_speculative_tokens",
        )


def check_draft_is_not_target(target: str, draft: str, name: Namer = _plain) -> None:
    if draft == target:
        raise SpecError(
            f"{name('draft_model')} is the target itself ({draft}); name a smaller model "
            f"with the same tokenizer, or use the baseline arm for {name('target_model')}",
            "draft_model",
        )


def check_speculative_method(
    generation: Generation, method: str | None, draft: str, name: Namer = _plain
) -> None:
    """The draft kind and method each generation can speculate with."""
    if generation == Generation.NEURON_PLUGIN:
        if method not in PLUGIN_SPECULATIVE_METHODS:
            raise SpecError(
                f"{name('speculative_method')} is {method!r}, but generation 'neuron-plugin' "
                f"(vllm-neuron 1.x) speculates only with {list(PLUGIN_SPECULATIVE_METHODS)}: "
                "set it to 'eagle3' with an EAGLE3 draft, or use the reproduction profile "
                "(the 0.9 fork) for a plain draft model",
                "speculative_method",
            )
        mark = PLUGIN_DRAFT_NAME_MARKS[method]
        if mark not in draft.lower():
            raise SpecError(
                f"{name('draft_model')} {draft} is a plain model (its name does not say "
                f"'{mark}'), but {name('speculative_method')} is {method!r}: vllm-neuron 1.x "
                f"has no plain draft-model speculation. Name {_DRAFT_KIND[method]} draft (e.g. "
                "RedHatAI/Qwen3-32B-speculator.eagle3 for Qwen3-32B; its model-store directory "
                f"name must say '{mark}'), or use the reproduction profile for a plain draft",
                "draft_model",
            )
    if generation == Generation.LOCAL_CPU and method not in (None, *LOCAL_SPECULATIVE_METHODS):
        raise SpecError(
            f"{name('speculative_method')}: the local CPU profile runs a plain draft model "
            "or an EAGLE3 head; speculative_method must be 'draft_model' or 'eagle3' "
            f"(local.drafter draft-model or eagle3), not {method!r}",
            "speculative_method",
        )


def check_dflash_k(k: int, draft_block_size: int | None, name: Namer = _plain) -> None:
    """DFlash proposes one trained block per pass: k must be that block size - 1."""
    if draft_block_size is None:
        raise SpecError(
            f"{name('dflash_block_size')} is not set; DFlash needs k = the drafter's trained "
            "block_size - 1: set it to the block_size in the drafter's config.json",
            "dflash_block_size",
        )
    if k != draft_block_size - 1:
        raise SpecError(
            f"{name('num_speculative_tokens')} is {k}, but a DFlash drafter with block_size "
            f"{draft_block_size} needs exactly {draft_block_size - 1} (block_size - 1, "
            "vllm-neuron dflash.py): set num_speculative_tokens to "
            f"{draft_block_size - 1}",
            "num_speculative_tokens",
        )


def check_plugin_arms(
    method: str | None,
    prefix_caching: bool,
    chunked_prefill: bool | None,
    tensor_parallel_size: int,
    name: Namer = _plain,
) -> None:
    """Settings both plugin arms share that the speculative method constrains: the arms
    must stay identical, so what DFlash needs off is off on the baseline too."""
    if method != "dflash":
        return
    if prefix_caching:
        raise SpecError(
            f"{name('prefix_caching')} is on, but DFlash on Neuron refuses prefix caching "
            "(vllm-neuron dflash.py) and the arms must run it alike: set prefix_caching to "
            "false",
            "prefix_caching",
        )
    if chunked_prefill is not False:
        raise SpecError(
            f"{name('chunked_prefill')} is {chunked_prefill!r}, but DFlash on Neuron needs "
            "--no-enable-chunked-prefill on both arms: set chunked_prefill to false",
            "chunked_prefill",
        )
    if tensor_parallel_size not in DFLASH_TENSOR_PARALLEL_SIZES:
        raise SpecError(
            f"{name('tensor_parallel_size')} is {tensor_parallel_size}, but DFlash on Neuron is "
            f"validated for {list(DFLASH_TENSOR_PARALLEL_SIZES)} only (vllm-neuron dflash.py): "
            "claim fewer devices (serving.neuron_devices) or use speculative_method 'eagle3'",
            "tensor_parallel_size",
        )


def check_plugin_only_settings(
    generation: Generation,
    prefix_caching: bool,
    chunked_prefill: bool | None,
    name: Namer = _plain,
) -> None:
    if generation == Generation.NEURON_PLUGIN:
        return
    if prefix_caching:
        raise SpecError(
            f"{name('prefix_caching')} is on, but only the plugin generation renders it: the "
            "reproduction profile (0.9 fork, V0 engine) ran without prefix caching and is "
            "frozen; set prefix_caching to false",
            "prefix_caching",
        )
    if chunked_prefill is not None:
        raise SpecError(
            f"{name('chunked_prefill')} is set, but only the plugin generation renders it; "
            "leave it unset",
            "chunked_prefill",
        )


def check_speculation_schedule(
    generation: Generation,
    schedule: Sequence[Sequence[int]] | None,
    max_k: int,
    max_num_seqs: int,
    name: Namer = _plain,
) -> None:
    """A k per batch-size range (vLLM's num_speculative_tokens_per_batch_size): an engine
    that serves it, ranges in order from 1 without gaps or overlaps up to at most
    max_num_seqs, each k between 0 and the deployed drafter's maximum (num_speculative_tokens),
    and at least one range that speculates."""
    if schedule is None:
        return
    field = "speculation_schedule"
    setting = name(field)
    if generation in SCHEDULE_REFUSED:
        raise SpecError(
            f"{setting} is set, but generation {generation.value!r} cannot serve it: "
            f"{SCHEDULE_REFUSED[generation]}. Leave {setting} unset and deploy one k "
            f"({name('num_speculative_tokens')}); the local CPU profile serves it",
            field,
        )
    if not schedule:
        raise SpecError(
            f"{setting} is empty; give [first, last, k] ranges or leave it unset", field
        )
    for entry in schedule:
        if len(entry) != 3:
            raise SpecError(f"{setting} entry {list(entry)} is not [first, last, k]", field)
        if entry[0] > entry[1]:
            raise SpecError(
                f"{setting} range {list(entry)} ends before it starts: write [first, last, k] "
                "with first <= last",
                field,
            )
    starts = [entry[0] for entry in schedule]
    if starts != sorted(starts):
        raise SpecError(
            f"{setting} is not sorted by batch size ({[list(e) for e in schedule]}): list the "
            "ranges from batch size 1 upwards",
            field,
        )
    previous_last = 0
    for entry in schedule:
        first, last, k = entry
        if first <= previous_last:
            raise SpecError(
                f"{setting} range {list(entry)} overlaps or precedes the range before it "
                f"(which ends at batch size {previous_last}): list the ranges sorted and "
                "non-overlapping",
                field,
            )
        if first != previous_last + 1:
            gap = f"{previous_last + 1}" + (
                f"-{first - 1}" if first - 1 > previous_last + 1 else ""
            )
            raise SpecError(
                f"{setting} leaves batch size {gap} without a k "
                f"(range {list(entry)}): start the first range at 1 and each next one right "
                "after the previous (vLLM would carry the previous k over the gap)",
                field,
            )
        if not 0 <= k <= max_k:
            raise SpecError(
                f"{setting} range {list(entry)} has k={k}, outside 0-{max_k}: the deployed "
                f"drafter drafts at most {name('num_speculative_tokens')} = {max_k} tokens "
                "(vLLM would clamp it silently); lower k or raise "
                f"{name('num_speculative_tokens')}",
                field,
            )
        previous_last = last
    if previous_last > max_num_seqs:
        raise SpecError(
            f"{setting} reaches batch size {previous_last}, beyond {name('max_num_seqs')} "
            f"{max_num_seqs} (the server never batches more): end the last range at "
            f"{max_num_seqs} or raise {name('max_num_seqs')}",
            field,
        )
    if all(k == 0 for _, _, k in schedule):
        raise SpecError(
            f"{setting} has k=0 in every range: the speculative arm would never speculate; "
            "give a range k >= 1, or leave it unset",
            field,
        )


def check_logical_neuron_cores(lnc: int | None, name: Namer = _plain) -> None:
    if lnc not in LOGICAL_NEURON_CORE_VALUES:
        raise SpecError(
            f"{name('logical_neuron_cores')} must be 1 or 2 on trn2 (got {lnc}); it must "
            "match the LNC the artifacts were compiled with",
            "logical_neuron_cores",
        )


def check_parallelism(
    tensor_parallel_size: int,
    lnc: int | None,
    claimed: int,
    name: Namer = _plain,
    claim: str = "the resource claim provides",
) -> None:
    """TP x LNC must use exactly the logical NeuronCores the DRA claim provides."""
    if tensor_parallel_size != claimed:
        raise SpecError(
            f"{name('tensor_parallel_size')} {tensor_parallel_size} with LNC {lnc} does not "
            f"use the {claimed} logical NeuronCores {claim}; set "
            f"{name('tensor_parallel_size')} to {claimed} or change the claimed devices / LNC",
            "tensor_parallel_size",
        )


def check_compiled_length(
    max_model_len: int, compiled_max_model_len: int | None, name: Namer = _plain
) -> None:
    if compiled_max_model_len is not None and max_model_len > compiled_max_model_len:
        raise SpecError(
            f"{name('max_model_len')} {max_model_len} exceeds the compiled length "
            f"{compiled_max_model_len}; lower max_model_len or recompile with a larger "
            f"{name('compiled_max_model_len')}",
            "max_model_len",
        )


def _check_draft_fields(spec: ServingSpec, name: Namer) -> None:
    k = spec.num_speculative_tokens
    if spec.draft_model is None:
        if (
            k is not None
            or spec.speculative_method is not None
            or spec.speculation_schedule is not None
        ):
            raise SpecError(
                f"{name('num_speculative_tokens')}/speculative_method/speculation_schedule are "
                "set but draft_model is not; set draft_model for the speculative arm or clear "
                "them for the baseline"
            )
        return
    if k is None:
        raise SpecError(
            f"{name('draft_model')} is set but num_speculative_tokens is not; "
            f"set k between {MIN_SPECULATIVE_TOKENS} and {MAX_SPECULATIVE_TOKENS}"
        )
    check_num_speculative_tokens(k, name)
    check_draft_is_not_target(spec.target_model, spec.draft_model, name)
    check_speculative_method(spec.generation, spec.speculative_method, spec.draft_model, name)
    check_speculation_schedule(
        spec.generation, spec.speculation_schedule, k, spec.max_num_seqs, name
    )


def _check_neuron_fields(spec: ServingSpec, name: Namer) -> None:
    check_logical_neuron_cores(spec.logical_neuron_cores, name)
    claimed = spec.claimed_logical_cores
    if claimed is None:
        raise SpecError(
            f"{name('claimed_logical_cores')} is missing; build the spec with "
            "ExperimentConfig.serving_spec() so it carries what the DRA claim provides"
        )
    check_parallelism(spec.tensor_parallel_size, spec.logical_neuron_cores, claimed, name)
    if not spec.compiled_artifacts_path:
        raise SpecError(
            f"{name('compiled_artifacts_path')} is empty; Neuron serving loads (or writes) its "
            "compiled model there, set it to a directory on the model store"
        )
    check_compiled_length(spec.max_model_len, spec.compiled_max_model_len, name)


def validate_spec(spec: ServingSpec) -> None:
    """Raise SpecError if the spec cannot be rendered into a working command."""

    def name(field: str) -> str:
        return f"{spec.service_name}: {field}"

    if not 1 <= spec.port <= 65535:
        raise SpecError(f"{name('port')} {spec.port} is not a TCP port (1-65535)")
    for field in ("max_num_seqs", "max_model_len", "block_size", "tensor_parallel_size"):
        if getattr(spec, field) < 1:
            raise SpecError(f"{name(field)} must be at least 1")
    _check_draft_fields(spec, name)
    check_plugin_only_settings(spec.generation, spec.prefix_caching, spec.chunked_prefill, name)
    if spec.generation == Generation.NEURON_PLUGIN:
        check_plugin_arms(
            spec.speculative_method,
            spec.prefix_caching,
            spec.chunked_prefill,
            spec.tensor_parallel_size,
            name,
        )
    if spec.generation in NEURON_GENERATIONS:
        _check_neuron_fields(spec, name)
    elif spec.tensor_parallel_size != 1:
        raise SpecError(
            f"{name('tensor_parallel_size')}: the local CPU profile runs one process; set "
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


def check_dflash_draft(draft_dir: str | Path, k: int) -> list[str]:
    """At serve time: the DFlash drafter's own block_size (config.json) fixes k. Returns a
    note when the file is not reachable (a hub id), raises SpecError when k is wrong."""
    config = _read_json(Path(draft_dir) / "config.json")
    block_size = config.get("block_size") if config else None
    if not isinstance(block_size, int):
        return [f"DFlash block_size not checked: no integer block_size in {draft_dir}/config.json"]
    check_dflash_k(k, block_size)
    return []
