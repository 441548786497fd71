"""The recommendation as one line of ``-c`` overrides (the shared KEY=VALUE syntax of
experiment/loading.py), ready to paste after ``cdk deploy`` / ``python -m local_run``."""

from __future__ import annotations

from typing import Literal

from tune.results import EAGLE3_CANDIDATE


def overrides_line(target: Literal["local", "trn2"], draft: str, k: int) -> str:
    if target == "trn2":
        return (
            f"-c experiment.serving.draft_model={draft} "
            f"-c experiment.serving.num_speculative_tokens={k}"
        )
    k_line = f"-c experiment.local.num_speculative_tokens={k}"
    if draft == EAGLE3_CANDIDATE:
        return f"-c experiment.local.drafter=eagle3 {k_line}"
    # The drafter too: a configuration that serves the EAGLE3 head would otherwise keep it.
    return (
        f"-c experiment.local.drafter=draft-model -c experiment.local.generator.draft={draft} "
        f"{k_line}"
    )


def schedule_overrides_line(
    draft: str, schedule: list[list[int]], predicted_speedups: list[float]
) -> str:
    """The local line that serves ``schedule`` with ``draft``: the drafter started at the
    schedule's largest k (vLLM's num_speculative_tokens, the maximum each range's k is
    clamped to), serving.speculation_schedule, and each range's predicted speedup for the
    guardrail that judges "stopped paying" against it
    (guardrails.live.schedule_predicted_speedups), quoted for the shell (brackets glob)."""
    max_k = max(k for _, _, k in schedule)
    value = ",".join(f"[{first},{last},{k}]" for first, last, k in schedule)
    speedups = ",".join(f"{speedup:.3g}" for speedup in predicted_speedups)
    return (
        f"{overrides_line('local', draft, max_k)} "
        f"-c 'experiment.serving.speculation_schedule=[{value}]' "
        f"-c 'experiment.guardrails.live.schedule_predicted_speedups=[{speedups}]'"
    )
