"""``statistics``: the paired bootstrap of every ratio."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from experiment.config.base import Section


class StatisticsConfig(Section):
    """Paired bootstrap of every speedup, acceptance and cost ratio (loadtest/stats.py)."""

    confidence: Annotated[float, Field(gt=0.5, lt=1)] = 0.95
    resamples: Annotated[int, Field(ge=200, le=100_000)] = 2000
    seed: int = 0
    # Below this many pairs a percentile bootstrap interval is too narrow to trust: the
    # verdict says "can't tell" whatever the interval (the local run has 32 per class).
    min_pairs_for_verdict: Annotated[int, Field(ge=2)] = 20
