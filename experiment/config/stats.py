"""``statistics``: the paired bootstrap of every ratio."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from experiment.config.base import Section


class StatisticsConfig(Section):
    """Paired bootstrap of every speedup, acceptance and cost ratio (loadtest/stats.py)."""

    confidence: Annotated[float, Field(gt=0.5, lt=1)] = Field(
        default=0.95, description="Confidence level of every interval; above 0.5, below 1."
    )
    resamples: Annotated[int, Field(ge=200, le=100_000)] = Field(
        default=2000, description="Bootstrap resamples; 200-100000."
    )
    seed: int = Field(default=0, description="Seed of the bootstrap resampling.")
    # 10: at 10-16 pairs the expanded percentile interval (loadtest/stats.py) covers as well
    # as the plain percentile interval did at 20, the old floor; the local run has 16 pairs
    # per class (32 prompts over 2 classes, each sent once), so its classes can decide.
    min_pairs_for_verdict: Annotated[int, Field(ge=2)] = Field(
        default=10,
        description=(
            'Fewest request pairs a verdict needs: below it the verdict is "can\'t tell" and '
            "says how many requests per prompt would reach it; 2 or more. At 10 the expanded "
            "percentile interval still covers about 95% on skewed latency data."
        ),
    )
    # 0.05: a cost difference under 5% does not pay for a second arm, its drafter and its
    # guardrails; validated here once, read by loadtest/verdict.py.
    equivalence_margin: Annotated[float, Field(gt=0, le=0.5)] = Field(
        default=0.05,
        description=(
            "Equivalence margin m of the verdict's cost ratio (SD / baseline cost per 1M "
            "output tokens): when its whole interval lies within [1/(1+m), 1+m], i.e. SD "
            'costs within a factor 1+m of the baseline either way, the verdict is "no gain" '
            "(keep the baseline): two one-sided tests, each at (1 - confidence) / 2; above 0, "
            "at most 0.5."
        ),
    )
