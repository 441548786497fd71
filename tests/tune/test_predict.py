"""The prediction math against cases worked out by hand."""

from __future__ import annotations

import math

import pytest

from loadtest.step_model import (
    PredictionError,
    StepCost,
    expected_accepted,
    extend_rates,
    predict,
    relative_error,
    tokens_per_step,
)
from tune.predict import (
    break_even,
    continuation_rate,
    fit_step_cost,
    rates_from_chunk_tokens,
    replay_tokens_per_step,
    trace_steps,
)

# Not geometric: a draft that nails the first two positions and then falls off a cliff
# (r2/r1 = 0.9, r3/r2 = 0.33, r4/r3 = 0.67): a geometric fit would get every k wrong.
CLIFF = [0.9, 0.81, 0.27, 0.18]


def test_expected_accepted_sums_the_first_k_positions() -> None:
    assert expected_accepted(CLIFF, 0) == 0
    assert expected_accepted(CLIFF, 1) == pytest.approx(0.9)
    assert expected_accepted(CLIFF, 2) == pytest.approx(1.71)
    assert expected_accepted(CLIFF, 3) == pytest.approx(1.98)
    assert tokens_per_step(CLIFF, 4) == pytest.approx(3.16)


def test_geometric_rates_reproduce_leviathans_formula() -> None:
    a, k = 0.7, 5
    rates = [a**i for i in range(1, 8)]
    assert tokens_per_step(rates, k) == pytest.approx((1 - a ** (k + 1)) / (1 - a))


def test_a_geometric_assumption_would_be_wrong_for_the_cliff() -> None:
    # Mean acceptance rate at k=4 is 2.16/4 = 0.54; geometric with a=0.54 predicts for k=2
    # 1 + .54 + .2916 = 1.83 tokens/step, the measured positions say 2.71.
    assert tokens_per_step(CLIFF, 2) == pytest.approx(2.71)
    a = expected_accepted(CLIFF, 4) / 4
    assert (1 - a**3) / (1 - a) == pytest.approx(1.8316, abs=1e-4)


def test_k_beyond_measured_positions_is_refused_or_extrapolated_explicitly() -> None:
    with pytest.raises(PredictionError, match="exceeds the 4 positions"):
        expected_accepted(CLIFF, 5)
    extended = extend_rates(CLIFF, 6)
    ratio = 0.18 / 0.27
    assert extended[:4].tolist() == CLIFF
    assert extended[4] == pytest.approx(0.18 * ratio)
    assert extended[5] == pytest.approx(0.18 * ratio**2)


@pytest.mark.parametrize("bad", [[], [1.2, 0.5], [-0.1]])
def test_rates_must_be_rates(bad: list[float]) -> None:
    with pytest.raises(PredictionError):
        expected_accepted(bad, 0)


def test_rates_from_client_chunks_drop_first_and_last_chunk() -> None:
    # Steps (middle chunks) carried 3, 1, 2, 3 tokens -> accepted 2, 0, 1, 2 at k=2.
    requests = [[1, 3, 1, 2], [1, 2, 3, 1]]
    rates = rates_from_chunk_tokens(requests, 2)
    # accepted = [2, 0] + [1, 2]: r1 = 3/4, r2 = 2/4.
    assert rates.tolist() == [0.75, 0.5]


def test_merged_chunks_are_caught_not_counted() -> None:
    with pytest.raises(PredictionError, match="merged"):
        rates_from_chunk_tokens([[1, 5, 2, 1]], 3)
    with pytest.raises(PredictionError, match="no full decode steps"):
        rates_from_chunk_tokens([[1, 2]], 3)


def test_step_cost_through_two_points_and_least_squares() -> None:
    cost = fit_step_cost(0.010, {2: 0.016, 6: 0.024})
    assert cost.per_k_s == pytest.approx(0.002)
    assert cost.intercept_s == pytest.approx(0.012)
    assert cost.fixed_overhead_s == pytest.approx(0.002)
    assert cost.step_s(0) == 0.010
    assert cost.step_s(4) == pytest.approx(0.020)
    noisy = fit_step_cost(0.010, {2: 0.016, 4: 0.021, 6: 0.024})
    # Least squares: slope = sum((x-4)(y-mean)) / sum((x-4)^2) = (-2*-0.00433+2*0.00367)/8
    assert noisy.per_k_s == pytest.approx(0.002)
    assert noisy.intercept_s == pytest.approx(0.020333333 - 0.008)


def test_step_cost_needs_two_k() -> None:
    with pytest.raises(PredictionError, match="two values of k"):
        fit_step_cost(0.01, {4: 0.02})


def test_predict_by_hand() -> None:
    cost = StepCost(baseline_s=0.010, intercept_s=0.012, per_k_s=0.002)
    # k=2: tau = 2.71, T = 0.016, per token 0.016/2.71; N = 101 tokens, TTFT 0.05 / 0.04.
    p = predict(CLIFF, cost, 2, output_tokens=101, ttft_s=0.05, baseline_ttft_s=0.04)
    assert p.tokens_per_step == pytest.approx(2.71)
    assert p.per_token_s == pytest.approx(0.016 / 2.71)
    assert p.e2e_s == pytest.approx(0.05 + 100 * 0.016 / 2.71)
    assert p.e2e_speedup == pytest.approx((0.04 + 1.0) / (0.05 + 100 * 0.016 / 2.71))
    assert p.per_token_speedup == pytest.approx(0.010 * 2.71 / 0.016)
    assert not p.extrapolated
    # k=4 costs 0.020 for 3.16 tokens: worse per token than k=2 (0.00633 vs 0.00590).
    p4 = predict(CLIFF, cost, 4, output_tokens=101, ttft_s=0.05, baseline_ttft_s=0.04)
    assert p4.per_token_s == pytest.approx(0.020 / 3.16)
    assert p4.e2e_speedup < p.e2e_speedup
    # k=0 is the baseline itself.
    p0 = predict(CLIFF, cost, 0, output_tokens=101, ttft_s=0.05, baseline_ttft_s=0.04)
    assert p0.e2e_speedup == pytest.approx(1.0)
    p6 = predict(CLIFF, cost, 6, output_tokens=101, ttft_s=0.05, baseline_ttft_s=0.04)
    assert p6.extrapolated


def test_relative_error() -> None:
    assert relative_error(1.1, 1.0) == pytest.approx(0.1)
    assert relative_error(0.9, 1.2) == pytest.approx(-0.25)
    with pytest.raises(PredictionError):
        relative_error(1.0, 0.0)


def test_break_even_interpolates_the_crossing() -> None:
    # 1.5 at c=1, 1.2 at c=2, 0.8 at c=4: crosses 1 halfway between 2 and 4.
    assert break_even([1, 2, 4], [1.5, 1.2, 0.8]) == pytest.approx(3.0)
    assert break_even([4, 1, 2], [0.8, 1.5, 1.2]) == pytest.approx(3.0)
    assert break_even([1, 2, 4], [1.5, 1.2, 1.1]) is None
    assert break_even([1, 2], [0.9, 0.8]) == 0.0
    assert math.isclose(break_even([1, 2], [1.0, 0.5]) or 0, 1.0)


# One request at window 8: four stretches where the draft gets 5 tokens right, four where it
# gets none, then a last chunk cut by max_tokens (30 tokens after the prefill's).
TRACE = [1, 6, 6, 6, 6, 1, 1, 1, 1, 2]


def test_replay_lands_small_windows_where_they_really_start() -> None:
    # At k=2 each easy stretch (runs 5,4,3,2,1,0) takes 2 steps of 3 tokens: 8 steps, then
    # 4 hard steps and 1 for the last 2 tokens: 30 tokens / 13 steps.
    assert replay_tokens_per_step([TRACE], 8, 2) == pytest.approx(30 / 13)
    # The per-position rates of the same trace (r1 = r2 = 0.5) say 2.0: they weigh the hard
    # stretches as a window of 8 visits them (half its steps), not as a window of 2 does.
    assert tokens_per_step(rates_from_chunk_tokens([TRACE], 8), 2) == pytest.approx(2.0)
    # At the measured window the replay is the trace itself, last short step included.
    assert replay_tokens_per_step([TRACE], 8, 8) == pytest.approx(30 / 9)


def test_replay_resolves_full_accepts_with_the_continuation_rate() -> None:
    # Full accept, then a step accepting 2: the draft continued, so the bonus position's run
    # is 1 + 2 and the full window's positions run 11..4. At k=4: 11 -> +5 -> 6 -> +5 -> 1
    # -> +2: 12 tokens in 3 steps.
    continued = [1, 9, 3]
    assert continuation_rate([trace_steps(continued, 8)]) == 1.0
    assert replay_tokens_per_step([continued], 8, 4) == pytest.approx(4.0)
    # Full accept, then a step accepting none: the bonus position's run is 0. At k=4:
    # 8 -> +5 -> 3 -> +4 -> 0 -> +1 -> 1 -> +2: 12 tokens in 4 steps.
    stopped = [1, 9, 1, 2]
    assert continuation_rate([trace_steps(stopped, 8)]) == 0.0
    assert replay_tokens_per_step([stopped], 8, 4) == pytest.approx(3.0)


def test_replay_is_seeded_and_refuses_what_it_cannot_replay() -> None:
    traces = [[1, 9, 1, 3, 9, 2, 1, 4], [1, 2, 9, 9, 1, 5]]
    first = replay_tokens_per_step(traces, 8, 4, seed=3)
    assert first == replay_tokens_per_step(traces, 8, 4, seed=3)
    assert 1.0 < first <= 5.0
    with pytest.raises(PredictionError, match="outside"):
        replay_tokens_per_step(traces, 8, 9)
    with pytest.raises(PredictionError, match="merged"):
        replay_tokens_per_step([[1, 10, 2]], 8, 2)
