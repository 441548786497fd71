"""The verdict table's rules (loadtest/verdict.py)."""

from __future__ import annotations

import pytest

from experiment import build_config
from loadtest.stats import Interval
from loadtest.verdict import Decision, MorePairs, decide, pairs_to_exclude_one

FLOOR = build_config({}).statistics.min_pairs_for_verdict


def _ratio(estimate: float | None, low: float | None, high: float | None, n: int = 48) -> Interval:
    return Interval(estimate=estimate, low=low, high=high, n=n, confidence=0.95)


@pytest.mark.parametrize(
    ("interval", "mismatches", "decision", "says"),
    [
        (_ratio(0.6, 0.5, 0.7), 0, Decision.USE_SD, "0.600x [0.500, 0.700]"),
        (_ratio(1.3, 1.1, 1.5), 0, Decision.DONT, "1.300x [1.100, 1.500]"),
        (_ratio(0.9, 0.7, 1.1), 0, Decision.CANT_TELL, "n=48"),
        (_ratio(None, None, None), 0, Decision.CANT_TELL, "no cost interval"),
        (_ratio(0.6, 0.5, 0.7), 2, Decision.DONT, "changed the output of 2"),
    ],
)
def test_decision_follows_the_interval(interval, mismatches, decision, says) -> None:
    got, reason = decide(interval, mismatches, FLOOR)
    assert got == decision
    assert says in reason


def test_too_few_pairs_cannot_tell_however_narrow_the_interval() -> None:
    narrow = _ratio(0.5, 0.49, 0.51, n=6)
    decision, reason = decide(narrow, 0, 20, MorePairs("local.requests_per_prompt", 1))
    assert decision == Decision.CANT_TELL and "only 6 pairs" in reason
    # 20 / 6 pairs: 4x the requests per prompt, named as the -c to type
    assert "min_pairs_for_verdict=20" in reason
    assert "-c local.requests_per_prompt=4" in reason
    assert decide(narrow, 0, 6)[0] == Decision.USE_SD


def test_the_default_local_run_has_the_pairs_per_class_the_verdict_needs() -> None:
    # The default local run: the suite plus local.extra_prompt_files, each prompt sent
    # local.requests_per_prompt times; every class must reach the floor, so it can decide.
    from collections import Counter

    from loadtest.prompts import load_prompts

    config = build_config({})
    files = [*config.loadtest.prompts.files, *config.local.extra_prompt_files]
    per_class = Counter(p.prompt_class for p in load_prompts(files))
    pairs = {name: count * config.local.requests_per_prompt for name, count in per_class.items()}
    assert pairs == {"open_ended": 16, "structured": 16}
    assert min(pairs.values()) >= FLOOR
    assert decide(_ratio(0.5, 0.4, 0.6, n=16), 0, FLOOR)[0] == Decision.USE_SD


def test_an_undecided_interval_says_how_many_pairs_would_decide() -> None:
    # log half-width toward 1 = log(1.05/0.9) = 0.154, distance = log(1/0.9) = 0.105:
    # n x (0.154/0.105)^2 = 16 x 2.15 -> 35 pairs, 3x the requests per prompt
    undecided = _ratio(0.9, 0.8, 1.05, n=16)
    assert pairs_to_exclude_one(undecided) == 35
    decision, reason = decide(undecided, 0, 10, MorePairs("loadtest.requests_per_prompt", 8))
    assert decision == Decision.CANT_TELL
    assert "n=16" in reason and "about 35 pairs" in reason
    assert "-c loadtest.requests_per_prompt=24" in reason
    # without the setting (an older run directory) it still says how much more
    assert "run 3x the requests" in decide(undecided, 0, 10)[1]


def test_the_suggested_setting_is_a_real_config_key() -> None:
    for setting in ("local.requests_per_prompt", "loadtest.requests_per_prompt"):
        command = MorePairs(setting, 1).times(3)
        key, value = command.removeprefix("-c ").split("=")
        config = build_config({key: value})
        section, field = key.split(".")
        assert getattr(getattr(config, section), field) == 3


def test_an_estimate_at_one_is_the_same_cost_not_a_call_for_more_pairs() -> None:
    same = _ratio(1.004, 0.95, 1.06, n=40)
    assert pairs_to_exclude_one(same) is None
    decision, reason = decide(same, 0, FLOOR)
    assert decision == Decision.CANT_TELL and "cost about the same" in reason


def test_an_interval_reaching_zero_asks_for_more_requests_without_a_projection() -> None:
    odd = _ratio(0.4, 0.0, 1.2, n=30)
    assert pairs_to_exclude_one(odd) is None
    decision, reason = decide(odd, 0, FLOOR)
    assert decision == Decision.CANT_TELL
    assert reason.endswith("holds 1 at 95%: run more requests")
