"""What is knowable offline about the serving models and image, checked at synth.

One table of the models the project knows: tokenizer family, vocabulary, context window and
whether the model is a plain causal LM (usable as a target or a draft-model draft) or an EAGLE3
speculator head (usable only as the drafter of the one verifier it was trained on). Each entry
names its source: the model's ``config.json`` on the hub (``vocab_size``,
``max_position_embeddings``, ``model_type``) or, for a speculator, its ``speculators_config``.

A model missing from the table is allowed: the check then warns and says what it could not
verify, instead of refusing a model the project has simply not catalogued.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from enum import StrEnum


class ModelKind(StrEnum):
    PLAIN = "plain"  # a causal LM: a target, or a draft for draft-model speculation
    EAGLE3 = "eagle3"  # an EAGLE3 speculator head: a drafter for its verifier only


@dataclass(frozen=True)
class KnownModel:
    family: str  # models of one family share one tokenizer
    vocab_size: int
    context: int | None  # max_position_embeddings; None: follows its verifier's
    kind: ModelKind
    source: str
    verifier: str | None = None  # EAGLE3: the target it was trained on


_QWEN3 = "qwen3"
_QWEN3_VOCAB = 151936  # config.json vocab_size of every Qwen3 dense model below
_QWEN3_CONTEXT = 40960  # config.json max_position_embeddings (32768 native + generation room)

KNOWN_MODELS: dict[str, KnownModel] = {
    **{
        f"Qwen/Qwen3-{size}": KnownModel(
            family=_QWEN3,
            vocab_size=_QWEN3_VOCAB,
            context=_QWEN3_CONTEXT,
            kind=ModelKind.PLAIN,
            source=f"huggingface.co/Qwen/Qwen3-{size}/blob/main/config.json",
        )
        # Checked against copies of these config.json files in the stored hub pages (the
        # official repositories' own pages were not in the store): all 151936 / 40960.
        for size in ("0.6B", "1.7B", "4B", "8B", "32B")
    },
    "RedHatAI/Qwen3-32B-speculator.eagle3": KnownModel(
        family=_QWEN3,
        vocab_size=_QWEN3_VOCAB,  # proposes into the verifier's vocabulary (draft_vocab_size maps)
        context=None,
        kind=ModelKind.EAGLE3,
        verifier="Qwen/Qwen3-32B",
        source="huggingface.co/RedHatAI/Qwen3-32B-speculator.eagle3 (config.json "
        "speculators_config: algorithm eagle3, verifier Qwen/Qwen3-32B)",
    ),
}


class UnknownModelWarning(UserWarning):
    """A model the table does not know: some offline checks could not run."""


# name[:tag] or name@sha256:digest; the last path component carries the tag.
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


def image_problem(image: str) -> str | None:
    """Why an image reference cannot be pulled reproducibly, or None."""
    name, at, digest = image.partition("@")
    if at:
        return (
            None if _DIGEST.fullmatch(digest) else f"its digest {digest!r} is not sha256:<64 hex>"
        )
    last = name.rsplit("/", 1)[-1]
    if ":" not in last:
        return "it has no tag (the registry would serve whatever 'latest' is)"
    tag = last.split(":", 1)[1]
    if not tag:
        return "its tag is empty"
    if not _TAG.fullmatch(tag):
        return f"its tag {tag!r} is not a valid tag"
    return None


def serving_problems(
    target: str,
    draft: str | None,
    method: str | None,
    max_model_len: int,
    compiled_max_model_len: int | None,
) -> list[tuple[str, str]]:
    """(field, message) for every offline-knowable mismatch; warns about unknown models."""
    problems: list[tuple[str, str]] = []
    unknown: list[str] = []
    known_target = KNOWN_MODELS.get(target)
    known_draft = KNOWN_MODELS.get(draft) if draft else None
    if known_target is None:
        unknown.append(f"target {target!r}: its context window and tokenizer")
    elif known_target.kind != ModelKind.PLAIN:
        problems.append(
            ("target_model", f"serving.target_model {target!r} is an EAGLE3 speculator head, "
             f"not a model that can serve; use its verifier {known_target.verifier!r}")
        )  # fmt: skip
    elif known_target.context is not None:
        longest = max(max_model_len, compiled_max_model_len or 0)
        if longest > known_target.context:
            field = "max_model_len" if max_model_len >= longest else "compiled_max_model_len"
            problems.append(
                (field, f"serving.{field} {longest} is beyond {target}'s context window of "
                 f"{known_target.context} tokens (max_position_embeddings, "
                 f"{known_target.source}); set it to {known_target.context} or less")
            )  # fmt: skip
    if draft and known_draft is None:
        unknown.append(f"draft {draft!r}: its tokenizer family against the target's")
    elif draft and known_draft is not None:
        problems += _draft_problems(target, known_target, draft, known_draft, method)
    if unknown:
        warnings.warn(
            "not in the project's model table (experiment/config/models.py), so not checked: "
            + "; ".join(unknown),
            UnknownModelWarning,
            stacklevel=2,
        )
    return problems


def _draft_problems(
    target: str,
    known_target: KnownModel | None,
    draft: str,
    known_draft: KnownModel,
    method: str | None,
) -> list[tuple[str, str]]:
    if known_draft.kind == ModelKind.EAGLE3:
        if known_draft.verifier != target:
            return [
                ("draft_model", f"serving.draft_model {draft!r} is an EAGLE3 head trained on "
                 f"{known_draft.verifier!r}; it cannot draft for {target!r} (another model's "
                 f"hidden states); use a drafter trained for {target!r} or that target")
            ]  # fmt: skip
        if method != "eagle3":
            return [
                ("speculative_method", f"serving.draft_model {draft!r} is an EAGLE3 head: set "
                 f"serving.speculative_method to 'eagle3' (it is {method!r})")
            ]  # fmt: skip
        return []
    problems: list[tuple[str, str]] = []
    if method == "eagle3":
        problems.append(
            ("speculative_method", f"serving.draft_model {draft!r} is a plain model, not an "
             "EAGLE3 head: 'eagle3' cannot load it; use an EAGLE3 drafter (e.g. "
             "RedHatAI/Qwen3-32B-speculator.eagle3 for Qwen/Qwen3-32B) or the fork generation")
        )  # fmt: skip
    if known_target is not None and (
        known_draft.family != known_target.family
        or known_draft.vocab_size != known_target.vocab_size
    ):
        problems.append(
            ("draft_model", f"serving.draft_model {draft!r} ({known_draft.family}, vocabulary "
             f"{known_draft.vocab_size}) cannot share a tokenizer with {target!r} "
             f"({known_target.family}, vocabulary {known_target.vocab_size}): every draft "
             "token would be rejected; pick a draft of the target's family")
        )  # fmt: skip
    return problems
