"""The verdict table's rules (loadtest/verdict.py)."""

from __future__ import annotations

import pytest

from loadtest.stats import Interval
from loadtest.verdict import Decision, decide


def _ratio(estimate: float | None, low: float | None, high: float | None) -> Interval:
    return Interval(estimate=estimate, low=low, high=high, n=48, confidence=0.95)


@pytest.mark.parametrize(
    ("interval", "mismatches", "decision", "says"),
    [
        (_ratio(0.6, 0.5, 0.7), 0, Decision.USE_SD, "0.600x [0.500, 0.700]"),
        (_ratio(1.3, 1.1, 1.5), 0, Decision.DONT, "1.300x [1.100, 1.500]"),
        (_ratio(0.9, 0.7, 1.1), 0, Decision.CANT_TELL, "48 pairs"),
        (_ratio(None, None, None), 0, Decision.CANT_TELL, "no cost interval"),
        (_ratio(0.6, 0.5, 0.7), 2, Decision.DONT, "changed the output of 2"),
    ],
)
def test_decision_follows_the_interval(interval, mismatches, decision, says) -> None:
    got, reason = decide(interval, mismatches)
    assert got == decision
    assert says in reason


def test_too_few_pairs_cannot_tell_however_narrow_the_interval() -> None:
    narrow = Interval(estimate=0.5, low=0.49, high=0.51, n=6, confidence=0.95)
    decision, reason = decide(narrow, 0, min_pairs=20)
    assert decision == Decision.CANT_TELL and "only 6 pairs" in reason
    assert decide(narrow, 0, min_pairs=6)[0] == Decision.USE_SD
