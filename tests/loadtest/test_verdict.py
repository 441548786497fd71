"""The verdict table's rules (loadtest/verdict.py)."""

from __future__ import annotations

import pytest

from experiment import build_config
from loadtest.stats import Interval
from loadtest.verdict import (
    DEFAULT_MARGIN,
    Decision,
    MorePairs,
    decide,
    equivalence_bounds,
    pairs_to_exclude_one,
    pairs_to_fit_margin,
)

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


def test_an_estimate_at_one_asks_for_the_pairs_that_would_show_no_gain() -> None:
    # Inside the default bounds [0.952, 1.05] but reaching past both: no exclusion of 1 to
    # project, the pairs that would fit it inside instead. Log half-widths 0.0543 (up) and
    # 0.0553 (down) against room 0.0448 and 0.0528: 40 x (0.0543/0.0448)^2 = 58.7 -> 59.
    same = _ratio(1.004, 0.95, 1.06, n=40)
    assert pairs_to_exclude_one(same) is None
    assert pairs_to_fit_margin(same, 0.05) == 59
    decision, reason = decide(same, 0, FLOOR, MorePairs("local.requests_per_prompt", 1))
    assert decision == Decision.CANT_TELL
    assert "outside the equivalence bounds [0.952, 1.050]" in reason
    assert "about 59 pairs would bring it inside (no gain)" in reason
    assert "-c local.requests_per_prompt=2" in reason


def test_an_estimate_at_one_outside_a_tiny_margin_is_the_same_cost() -> None:
    # A margin smaller than SAME_COST, the estimate outside it: no projection either way.
    same = _ratio(1.004, 0.95, 1.06, n=40)
    assert pairs_to_fit_margin(same, 0.003) is None
    decision, reason = decide(same, 0, FLOOR, margin=0.003)
    assert decision == Decision.CANT_TELL and "cost about the same" in reason


@pytest.mark.parametrize(
    ("interval", "decision", "says"),
    [
        # clear win and clear loss: the interval excludes 1 and leaves the bounds
        (_ratio(0.80, 0.74, 0.86), Decision.USE_SD, "SD costs 0.800x [0.740, 0.860]"),
        (_ratio(1.20, 1.12, 1.29), Decision.DONT, "SD costs 1.200x [1.120, 1.290]"),
        # equivalent: the whole interval inside [1/1.05, 1.05], holding 1 or not
        (_ratio(1.00, 0.97, 1.03), Decision.NO_GAIN, "keep the baseline: SD costs 1.000x"),
        (_ratio(0.98, 0.96, 0.99), Decision.NO_GAIN, "inside the equivalence bounds"),
        (_ratio(1.02, 1.01, 1.04), Decision.NO_GAIN, "[0.952, 1.050]"),
        # a wide interval straddling a bound and holding 1: neither shown
        (_ratio(0.96, 0.85, 1.08), Decision.CANT_TELL, "holds 1 at 95%"),
        # leaves the bounds on one side only, without excluding 1
        (_ratio(1.00, 0.99, 1.06), Decision.CANT_TELL, "outside the equivalence bounds"),
    ],
)
def test_each_outcome_against_the_equivalence_margin(interval, decision, says) -> None:
    got, reason = decide(interval, 0, FLOOR, margin=0.05)
    assert got == decision
    assert says in reason


def test_no_gain_states_the_alpha_of_each_one_sided_test() -> None:
    equal = _ratio(1.0, 0.98, 1.02)
    assert "two one-sided tests at alpha=0.025 each, the 95% interval" in decide(equal, 0, FLOOR)[1]
    at_90 = equal.model_copy(update={"confidence": 0.90})
    assert "alpha=0.05 each, the 90% interval" in decide(at_90, 0, FLOOR)[1]


def test_the_margin_bounds_are_symmetric_on_the_log_scale_and_inclusive() -> None:
    low, high = equivalence_bounds(0.05)
    assert low == pytest.approx(1 / 1.05) and high == pytest.approx(1.05)
    assert low * high == pytest.approx(1)
    on_the_bounds = _ratio(1.0, low, high)
    assert decide(on_the_bounds, 0, FLOOR, margin=0.05)[0] == Decision.NO_GAIN
    just_past = _ratio(1.0, low, high * 1.001)
    assert decide(just_past, 0, FLOOR, margin=0.05)[0] == Decision.CANT_TELL
    # a wider margin takes in what a narrow one leaves undecided
    assert decide(_ratio(0.96, 0.85, 1.08), 0, FLOOR, margin=0.2)[0] == Decision.NO_GAIN


def test_lossless_and_the_pair_floor_come_before_equivalence() -> None:
    equal = _ratio(1.0, 0.99, 1.01, n=6)
    assert decide(equal, 1, 2)[0] == Decision.DONT
    assert decide(equal, 0, 10)[0] == Decision.CANT_TELL
    assert decide(equal, 0, 6)[0] == Decision.NO_GAIN


def test_the_margin_is_validated_once_in_the_config() -> None:
    assert build_config({}).statistics.equivalence_margin == DEFAULT_MARGIN
    for bad in ("0", "-0.05", "0.6"):
        with pytest.raises(ValueError, match=r"statistics\.equivalence_margin"):
            build_config({"statistics.equivalence_margin": bad})
    settings = build_config({"statistics.equivalence_margin": "0.1"}).statistics
    assert settings.equivalence_margin == 0.1


def test_an_interval_reaching_zero_asks_for_more_requests_without_a_projection() -> None:
    odd = _ratio(0.4, 0.0, 1.2, n=30)
    assert pairs_to_exclude_one(odd) is None
    decision, reason = decide(odd, 0, FLOOR)
    assert decision == Decision.CANT_TELL
    assert reason.endswith("holds 1 at 95%: run more requests")
