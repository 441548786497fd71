"""From runs to model, checks, recommendation and break-even, on synthetic servers whose
step cost and acceptance are known exactly."""

from __future__ import annotations

import pytest
from synthetic_runs import BOOT, C0, C1, make_run, sweep

from loadtest.results import PriceBasis
from loadtest.step_model import PredictionError
from tune.analysis import (
    break_even_by_class,
    class_model,
    cost_at_load,
    holdout_checks,
    recommend,
    replayed_taus,
    within_one_step,
)
from tune.render.words import break_even_text
from tune.results import Acceptance, Setting


def test_fit_recovers_step_cost_and_per_position_acceptance_from_client_chunks() -> None:
    model, notes = class_model(sweep(), "d", "structured", [2, 8], 10, BOOT)
    assert model.step_cost.baseline_step_ms == pytest.approx(10.0)
    assert model.step_cost.intercept_ms == pytest.approx(12.0)
    assert model.step_cost.per_k_ms == pytest.approx(2.0)
    assert model.acceptance.source == "client_chunks"
    assert any("no spec-decode counters" in n for n in notes)
    # Full steps only (first and last chunk dropped): close to the designed cycle.
    expected = [7 / 8, 6 / 8, 5 / 8, 4 / 8, 3 / 8, 2 / 8, 1 / 8, 0]
    assert model.acceptance.per_position_rate == pytest.approx(expected, abs=0.03)
    assert model.acceptance_from_k == 8
    assert [p.extrapolated for p in model.predictions] == [False] * 8 + [True] * 2


def test_counters_win_over_client_chunks_and_tau_comes_from_replaying_the_chunks() -> None:
    runs = sweep()
    rates = [0.9, 0.5, 0.4, 0.3, 0.2, 0.1, 0.05, 0.01]
    runs[2].classes["structured"].acceptance = Acceptance(
        source="counters", per_position_rate=rates, acceptance_rate=0.3
    )
    model, notes = class_model(runs, "d", "structured", [2, 8], 8, BOOT)
    assert model.acceptance.per_position_rate == rates
    assert model.tokens_per_step_source == "trace_replay"
    # the k=2 server's own tokens per step, replayed from the k=8 chunks
    measured_2 = next(m for m in model.measured if m.k == 2)
    assert model.prediction(2).tokens_per_step == pytest.approx(measured_2.tokens_per_step)
    assert not notes


def test_tau_falls_back_to_per_position_rates_when_chunks_cannot_be_replayed() -> None:
    runs = sweep()
    rates = [0.9, 0.5, 0.4, 0.3, 0.2, 0.1, 0.05, 0.01]
    block = runs[2].classes["structured"]
    block.acceptance = Acceptance(source="counters", per_position_rate=rates, acceptance_rate=0.3)
    block.samples[0].chunk_tokens[3] = 12  # two steps merged into one chunk
    model, notes = class_model(runs, "d", "structured", [2, 8], 8, BOOT)
    assert model.tokens_per_step_source == "per_position_rates"
    assert model.prediction(3).tokens_per_step == pytest.approx(2.8)
    assert any("cannot be replayed" in n for n in notes)


def test_an_eagle_drafter_takes_tau_from_the_rates_a_draft_model_from_the_replay() -> None:
    # An EAGLE head keeps drafts by the depth in the step (synthetic_runs: step n keeps
    # min(EAGLE3_AT_8[n % 8], k)); replaying its k=8 chunks as a text's runs of right tokens
    # would land smaller windows where they never start. Both servers follow their model.
    runs = sweep(("d", "eagle3"))
    head, notes = class_model(runs, "eagle3", "structured", [2, 8], 8, BOOT)
    assert head.tokens_per_step_source == "per_position_rates"
    assert any("depth in the step" in note for note in notes)
    draft, _ = class_model(runs, "d", "structured", [2, 8], 8, BOOT)
    assert draft.tokens_per_step_source == "trace_replay"
    for model in (head, draft):
        for measured in model.measured:
            predicted = model.prediction(measured.k).tokens_per_step
            assert predicted == pytest.approx(measured.tokens_per_step, rel=0.02), (
                model.draft,
                measured.k,
            )
    # The replay would have been wrong for the head: at k=4 it predicts far fewer tokens.
    replayed, _ = replayed_taus(
        next(r for r in runs if r.setting == Setting(draft="eagle3", k=8)).classes["structured"],
        8,
        head.acceptance,
        8,
    )
    at_4 = next(m for m in head.measured if m.k == 4).tokens_per_step
    assert replayed[4] < 0.9 * at_4


def test_held_out_predictions_match_a_server_that_follows_the_model() -> None:
    models = [class_model(sweep(), "d", name, [2, 8], 10, BOOT)[0] for name in ("structured",)]
    checks = holdout_checks(models, sweep(), 0.15)
    assert [c.k for c in checks] == [4, 6]
    for check in checks:
        assert abs(check.relative_error) < 0.03, check
        assert check.within_tolerance
        assert check.measured.n == 4


def test_a_server_that_breaks_the_model_fails_the_check() -> None:
    runs = sweep()
    runs[3] = make_run(Setting(draft="d", k=4), "holdout", slow=1.5)  # k=4 50 % slower than fitted
    model, _ = class_model(runs, "d", "structured", [2, 8], 10, BOOT)
    (check, _) = holdout_checks([model], runs, 0.15)
    assert check.k == 4
    assert not check.within_tolerance
    assert check.relative_error > 0.3
    # The components name the culprit: the step time, not the acceptance or the TTFT.
    parts = {c.name: c for c in check.components}
    assert parts["step_ms"].relative_error == pytest.approx(1 / 1.5 - 1, abs=0.01)
    assert parts["per_token_ms"].relative_error == pytest.approx(1 / 1.5 - 1, abs=0.03)
    tau_error = parts["tokens_per_step"].relative_error
    assert tau_error is not None and abs(tau_error) < 0.03
    assert parts["ttft_ms"].relative_error == pytest.approx(0.0)
    assert parts["baseline_step_ms"].relative_error == pytest.approx(0.0)
    assert parts["step_ms"].measured == pytest.approx((C0 + 4 * C1) * 1.5 * 1e3)


def test_recommendation_is_the_best_predicted_measured_range_k() -> None:
    runs = sweep()
    models = [class_model(runs, "d", n, [2, 8], 10, BOOT)[0] for n in ("open_ended", "structured")]
    recs = recommend(models, runs, {"open_ended": 4, "structured": 4}, BOOT)
    assert [r.scope for r in recs] == ["open_ended", "structured", "all"]
    for rec in recs[:2]:
        model = next(m for m in models if m.prompt_class == rec.scope)
        best = max(
            (p for p in model.predictions if not p.extrapolated), key=lambda p: p.e2e_speedup
        )
        assert (rec.draft, rec.k) == ("d", best.k)
        measured = max(model.measured, key=lambda m: m.point)
        assert rec.best_measured_k == measured.k
        assert rec.within_one_step == within_one_step(
            rec.k, measured.k, [m.k for m in model.measured]
        )
    overall = recs[2]
    assert overall.k in range(1, 9)
    assert overall.best_measured_k in (2, 4, 6, 8)


def test_within_one_step_uses_measured_neighbours() -> None:
    grid = [2, 4, 6, 8]
    assert within_one_step(5, 6, grid)
    assert within_one_step(4, 6, grid)
    assert not within_one_step(3, 6, grid)
    assert within_one_step(9, 8, grid)
    assert not within_one_step(10, 8, grid)


def test_break_even_from_runs_at_each_concurrency() -> None:
    setting = Setting(draft="d", k=4)
    runs = [
        make_run(Setting(), "baseline", 1),
        make_run(Setting(), "baseline", 2),
        make_run(Setting(), "baseline", 4),
        make_run(setting, "holdout", 1),
        make_run(setting, "break_even", 2, slow=1.6),
        make_run(setting, "break_even", 4, slow=3.0),
    ]
    blocks = break_even_by_class(runs, setting, 4, BOOT)
    assert [b.prompt_class for b in blocks] == ["open_ended", "structured"]
    for block in blocks:
        assert [c for c, _ in block.points] == [1, 2, 4]
        speedups = [p.point for _, p in block.points]
        assert speedups[0] > speedups[1] > 1 > speedups[2]
        assert 2 < (block.break_even_concurrency or 0) < 4
        # Both renderers print the same words, rounded, not the raw interpolated float.
        text = break_even_text(block)
        assert text == f"{block.break_even_concurrency:.1f} concurrent requests"
    always = blocks[0].model_copy(update={"break_even_concurrency": None})
    assert break_even_text(always) == "pays at every level measured (up to 4)"
    never = blocks[0].model_copy(update={"break_even_concurrency": 0.0})
    assert break_even_text(never) == "pays at no level measured"


def test_missing_fit_runs_are_a_clear_error() -> None:
    runs = sweep()[:2]
    with pytest.raises(PredictionError, match="fewer than two fit k"):
        class_model(runs, "d", "structured", [2, 8], 8, BOOT)


def _price(usd_per_hour: float) -> PriceBasis:
    return PriceBasis(
        target="local",
        instance_type="test.large",
        capacity_type="local",
        instance_usd_per_hour=usd_per_hour,
        devices_claimed=1,
        devices_per_instance=2,
        source="test",
        as_of="2026-01-01",
        nominal=True,
    )


def test_cost_per_million_tokens_at_each_load_and_the_throughput_optimal_level() -> None:
    setting = Setting(draft="d", k=4)
    tokens = 4 * (401 + 201)  # make_run: 4 prompts per class, 401 and 201 tokens
    walls = {(None, 1): 2.0, (None, 2): 1.0, (None, 4): 1.25, ("d", 1): 1.0, ("d", 2): 0.8}
    runs = [
        make_run(Setting(draft=d, k=4 if d else 0), "baseline" if d is None else "break_even", c)
        for d, c in walls
    ]
    runs = [r.model_copy(update={"wall_s": walls[(r.setting.draft, r.concurrency)]}) for r in runs]
    cost = cost_at_load(runs, setting, _price(7.2))  # half the instance: $3.6/h = $0.001/s
    assert cost is not None
    baseline, sd = cost.arms
    assert baseline.setting == Setting() and sd.setting == setting
    assert [p.concurrency for p in baseline.points] == [1, 2, 4]
    assert baseline.points[0].output_throughput_tok_s == pytest.approx(tokens / 2.0)
    # $0.001 per second / (tokens per second) x 1e6 tokens
    assert baseline.points[0].usd_per_million_output_tokens == pytest.approx(
        0.001 / (tokens / 2.0) * 1e6
    )
    assert baseline.optimal is not None and baseline.optimal.concurrency == 2
    assert baseline.optimal.usd_per_million_output_tokens == pytest.approx(0.001 / tokens * 1e6)
    assert sd.optimal is not None and sd.optimal.concurrency == 2
    assert sd.optimal.output_throughput_tok_s == pytest.approx(tokens / 0.8)


def test_no_cost_by_load_without_a_concurrency_sweep() -> None:
    assert cost_at_load(sweep(), Setting(draft="d", k=4), _price(1.0)) is None
