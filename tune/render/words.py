"""Phrases both renderers (tune.md and the terminal summary) print the same way: a measured
speedup with its interval and n, a drafter choice and its margin, held-out errors by drafter,
the break-even load."""

from __future__ import annotations

from loadtest.results import Interval
from tune.results import (
    BreakEven,
    Check,
    DrafterChoice,
    MeasuredSpeedup,
    ScheduleRange,
    drafter_of,
)


def interval_text(interval: Interval) -> str:
    """``1.23x [1.10, 1.35] (n=16)``: the point, its interval (when there is one) and n."""
    bounds = (
        f" [{interval.low:.2f}, {interval.high:.2f}]"
        if interval.low is not None and interval.high is not None
        else " [no interval]"
    )
    point = f"{interval.estimate:.2f}x" if interval.estimate is not None else "-"
    return f"{point}{bounds} (n={interval.n})"


def speedup_text(point: MeasuredSpeedup | None) -> str:
    return "not measured" if point is None else interval_text(point.e2e_speedup)


def candidate_text(drafter: str, draft: str, k: int) -> str:
    """``eagle3 k=3`` for the head, ``draft-model small k=4`` for a draft."""
    return f"{draft} k={k}" if draft == drafter else f"{drafter} {draft} k={k}"


def margin_text(choice: DrafterChoice) -> str:
    """By how much the choice beats its runner-up: predicted, then measured head to head."""
    if choice.runner_up_draft is None or choice.runner_up_drafter is None:
        return "no other candidate fitted"
    assert choice.runner_up_k is not None
    rival = candidate_text(choice.runner_up_drafter, choice.runner_up_draft, choice.runner_up_k)
    text = f"beats {rival} by {choice.predicted_margin:.2f}x predicted"
    margin = choice.margin
    if margin is None:
        return text + "; not measured head to head"
    verdict = (
        "faster, the interval excludes 1"
        if margin.low is not None and margin.low > 1
        else "slower, the interval excludes 1"
        if margin.high is not None and margin.high < 1
        else "can't tell apart: the interval holds 1"
    )
    return (
        f"{text}; measured {interval_text(margin)} at k={choice.measured_k} vs "
        f"k={choice.runner_up_measured_k} ({verdict})"
    )


def holdout_by_drafter(checks: list[Check], tolerance: float) -> list[str]:
    """Per drafter: the held-out checks' largest |error| and how many met the goal."""
    lines = []
    for drafter in sorted({drafter_of(c.draft) for c in checks}):
        mine = [c for c in checks if drafter_of(c.draft) == drafter]
        worst = max(mine, key=lambda c: abs(c.relative_error))
        within = sum(c.within_tolerance for c in mine)
        lines.append(
            f"{drafter}: largest held-out error {worst.relative_error:+.1%} ({worst.draft} "
            f"{worst.prompt_class} k={worst.k}); {within} of {len(mine)} checks within "
            f"{tolerance:.0%}"
        )
    return lines


def break_even_text(break_even: BreakEven) -> str:
    """Where SD stops paying as the load grows, in words (None: it pays at every level)."""
    if break_even.break_even_concurrency is None:
        return f"pays at every level measured (up to {break_even.points[-1][0]})"
    if break_even.break_even_concurrency == 0:
        return "pays at no level measured"
    return f"{break_even.break_even_concurrency:.1f} concurrent requests"


def schedule_range_text(r: ScheduleRange) -> str:
    """``batch 1-2: k=3, predicted 1.40x [1.30, 1.50] (n=32) at batch 2``; a range where no
    k pays says so and where the loss goes instead."""
    span = f"batch {r.first}" if r.first == r.last else f"batch {r.first}-{r.last}"
    gain = f"{interval_text(r.predicted_speedup)} at batch {r.at_batch_size}"
    text = f"{span}: k={r.k}, predicted {gain}"
    if r.k == 0:
        text += " (the drafter still runs each step)"
    estimate = r.predicted_speedup.estimate
    if estimate is not None and estimate <= 1:
        text += "; no k pays here: route these loads to the baseline"
    return text
