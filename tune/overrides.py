"""The recommendation as one line of ``-c`` overrides (the shared KEY=VALUE syntax of
experiment/loading.py), ready to paste after ``cdk deploy`` / ``python -m local_run``."""

from __future__ import annotations

from typing import Literal


def overrides_line(target: Literal["local", "trn2"], draft: str, k: int) -> str:
    if target == "trn2":
        return (
            f"-c experiment.serving.draft_model={draft} "
            f"-c experiment.serving.num_speculative_tokens={k}"
        )
    return (
        f"-c experiment.local.generator.draft={draft} "
        f"-c experiment.local.num_speculative_tokens={k}"
    )
