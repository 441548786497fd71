"""The terminal summary of a sweep: held-out checks, the recommendation, the drafter per
class with its margin, break-even load and the line to paste."""

from __future__ import annotations

from tune.render.words import (
    break_even_text,
    candidate_text,
    holdout_by_drafter,
    margin_text,
    schedule_range_text,
    speedup_text,
)
from tune.results import TuneResult


def summary_lines(result: TuneResult) -> list[str]:
    lines = []
    for c in result.checks:
        lines.append(
            f"held-out {c.draft}/{c.prompt_class} k={c.k}: predicted {c.predicted_speedup:.2f}x, "
            f"measured {speedup_text(c.measured)}, error {c.relative_error:+.1%}"
        )
    lines += [f"held-out {line}" for line in holdout_by_drafter(result.checks, result.tolerance)]
    for r in result.recommendations:
        lines.append(
            f"recommended ({r.scope}): {r.draft} k={r.k}, predicted {r.predicted_speedup:.2f}x"
        )
    # The drafter per class only says more than the lines above when there was a rival.
    for choice in (c for c in result.drafter_choices if c.runner_up_draft is not None):
        lines.append(
            f"drafter ({choice.scope}): {candidate_text(choice.drafter, choice.draft, choice.k)}"
            f" {margin_text(choice)}; paste: {choice.overrides}"
        )
    for b in result.break_even:
        lines.append(f"SD stops paying above ({b.prompt_class}): {break_even_text(b)}")
    if result.overrides:
        lines.append(f"paste: {result.overrides}")
    if result.schedule is not None:
        schedule = result.schedule
        lines += [
            f"schedule ({schedule.draft}, measured at batch sizes {schedule.batch_sizes}): "
            f"{schedule_range_text(r)}"
            for r in schedule.ranges
        ]
        if schedule.overrides:
            lines.append(f"paste (schedule): {schedule.overrides}")
    lines += [f"note: {n}" for n in result.notes]
    return lines
