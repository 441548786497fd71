"""The speculation schedule: a k per batch-size range from step costs measured at a few
batch sizes and the per-position acceptance (tune/schedule.py), its -c line, and its report.

The synthetic servers of synthetic_runs.py are slowed per concurrency level by known factors:
the baseline's step grows little with the batch, the speculative step much more (the verify
of k + 1 tokens per sequence turns a CPU compute-bound), so speculation pays one request at a
time and stops paying at a batch of 4."""

from __future__ import annotations

import shlex
import statistics

import numpy as np
import pytest
from synthetic_runs import BASE_STEP, BOOT, C0, C1, TTFT, make_run

from experiment.config import Arm
from experiment.loading import config_from_arguments, config_parser
from runtime import validate as rules
from runtime.render import render
from runtime.spec import Generation
from tune.analysis import TOLERANCE, fit_and_recommend
from tune.drafters import workload_speedups
from tune.render.markdown import render_markdown
from tune.render.text import summary_lines
from tune.results import Run, Setting, TuneResult
from tune.schedule import add_schedule, derive_schedule, weighted_medians

BASELINE_SLOW = {1: 1.0, 2: 1.1, 4: 1.2}
SD_SLOW = {1: 1.0, 2: 1.4, 4: 3.0}
FIT = (2, 8)
DRAFT = "small"  # a draft of local.generator.drafts, so the paste line is a valid config


def load_sweep(levels: tuple[int, ...] = (1, 2, 4)) -> list[Run]:
    runs = [make_run(Setting(), "baseline", c, BASELINE_SLOW[c]) for c in levels]
    for k in FIT:
        runs += [make_run(Setting(draft=DRAFT, k=k), "fit", c, SD_SLOW[c]) for c in levels]
    runs += [make_run(Setting(draft=DRAFT, k=k), "holdout") for k in (4, 6)]
    return runs


def fitted(runs: list[Run]) -> TuneResult:
    result = TuneResult(target="local", tolerance=TOLERANCE, plan=None, runs=runs)
    fit_and_recommend(result, {DRAFT: list(FIT)}, 8, BOOT)
    return result


WEIGHTS = {"structured": 4, "open_ended": 4}


def test_weighted_median_is_the_median_with_unit_weights_and_follows_the_weights() -> None:
    for values in ([3.0, 1.0, 2.0], [4.0, 1.0, 3.0, 2.0]):
        ones = np.ones((1, len(values)))
        assert weighted_medians(np.asarray(values), ones)[0] == statistics.median(values)
    values = np.asarray([1.0, 2.0, 10.0, np.nan])
    weights = np.asarray([[0, 1, 3, 5], [3, 0, 0, 1], [0, 0, 0, 7]], dtype=float)
    medians = weighted_medians(values, weights)
    assert medians[:2].tolist() == [10.0, 1.0]  # the NaN (a failed request) weighs nothing
    assert np.isnan(medians[2])


def with_a_failed_request(runs: list[Run]) -> list[Run]:
    """The k=8 fit run at concurrency 1 with one request failed and a slower TTFT: runs of
    unequal size, so a mean of the runs' means would differ from the pooled mean."""
    out = []
    for run in runs:
        if run.setting == Setting(draft=DRAFT, k=8) and run.concurrency == 1:
            block = run.classes["structured"]
            slower = [s.model_copy(update={"ttft_s": 2 * TTFT}) for s in block.samples]
            failed = slower[0].model_copy(update={"ok": False, "error": "boom"})
            block = block.model_copy(update={"samples": [failed, *slower[1:]]})
            run = run.model_copy(update={"classes": {**run.classes, "structured": block}})
        out.append(run)
    return out


@pytest.mark.parametrize("failed", [False, True])
def test_at_one_request_the_schedule_predicts_what_the_fitted_model_does(failed: bool) -> None:
    runs = with_a_failed_request(load_sweep()) if failed else load_sweep()
    result = fitted(runs)
    schedule, _ = derive_schedule(runs, result.models, DRAFT, WEIGHTS, 4, BOOT)
    assert schedule is not None
    model_view = {k: s for s, _, k in workload_speedups(result.models, WEIGHTS)}
    at_one = {
        p.k: p.e2e_speedup.estimate for p in schedule.predictions if p.batch_size == 1 and p.k
    }  # k = 0 is the schedule's own (the fitted model knows no served k = 0)
    assert at_one.keys() == model_view.keys()
    for k, speedup in at_one.items():
        assert speedup == pytest.approx(model_view[k], rel=1e-9)


def test_the_prediction_at_a_measured_batch_uses_that_batchs_step_costs() -> None:
    runs = load_sweep()
    result = fitted(runs)
    schedule, _ = derive_schedule(runs, result.models, DRAFT, WEIGHTS, 4, BOOT)
    assert schedule is not None
    k = 3
    base_e2e = sd_e2e = 0.0
    for model in result.models:
        decode = model.output_tokens - 1
        base_e2e += TTFT + decode * BASE_STEP * BASELINE_SLOW[4]
        tau = model.prediction(k).tokens_per_step
        sd_e2e += TTFT + decode * (C0 + C1 * k) * SD_SLOW[4] / tau
    point = next(p for p in schedule.predictions if p.batch_size == 4 and p.k == k)
    assert point.measured
    assert point.e2e_speedup.estimate == pytest.approx(base_e2e / sd_e2e, rel=1e-6)
    tokens = sum(4 * m.output_tokens for m in result.models)
    assert point.output_throughput_tok_s == pytest.approx(4 * tokens / (4 * sd_e2e), rel=1e-6)
    cost = next(c for c in schedule.step_costs if c.batch_size == 4)
    assert cost.baseline_step_ms == pytest.approx(BASE_STEP * BASELINE_SLOW[4] * 1e3)
    assert cost.per_k_ms == pytest.approx(C1 * SD_SLOW[4] * 1e3)
    assert cost.intercept_ms == pytest.approx(C0 * SD_SLOW[4] * 1e3)


def test_each_batch_size_takes_its_best_k_and_where_none_pays_is_named() -> None:
    runs = load_sweep()
    result = fitted(runs)
    schedule, notes = derive_schedule(runs, result.models, DRAFT, WEIGHTS, 4, BOOT)
    assert schedule is not None
    first, last = schedule.ranges[0], schedule.ranges[-1]
    assert (first.first, first.k > 0) == (1, True)
    assert first.predicted_speedup.estimate > 1
    # Past the break-even no k pays: its own range, its loss predicted, named in a note.
    assert last.last == 4 and last.predicted_speedup.estimate <= 1
    losing = f"{last.first}-{last.last}" if last.first < last.last else str(last.first)
    assert notes == [
        f"schedule: {DRAFT} pays at no k at batch sizes {losing}; a k=0 range would still run "
        "the drafter every step (vLLM keeps its KV cache in step), so route those loads to the "
        "baseline arm instead (tiered routing, the guardrails)"
    ]
    # Every batch size's k is the best predicted one of 0..K.
    for b in range(1, 5):
        mine = [p for p in schedule.predictions if p.batch_size == b]
        best = max(mine, key=lambda p: p.e2e_speedup.estimate)
        chosen = next(r.k for r in schedule.ranges if r.first <= b <= r.last)
        assert chosen == best.k
    # vLLM-valid and within the drafter's maximum: the serving rules accept it as it is.
    rules.check_speculation_schedule(
        Generation.LOCAL_CPU, schedule.entries, max(r.k for r in schedule.ranges), 4
    )


def test_k0_is_priced_as_vllm_serves_it_never_as_the_baseline() -> None:
    """At k=0 vLLM still runs the drafter's forward each step (llm_base_proposer.propose):
    priced as a k=1 step yielding one token, k=0 is slower than the baseline and than k=1
    at every batch size, so it is never chosen where a k > 0 exists."""
    runs = load_sweep()
    result = fitted(runs)
    schedule, _ = derive_schedule(runs, result.models, DRAFT, WEIGHTS, 4, BOOT)
    assert schedule is not None
    by = {(p.batch_size, p.k): p.e2e_speedup.estimate for p in schedule.predictions}
    for b in range(1, 5):
        assert by[(b, 0)] < 1 and by[(b, 0)] < by[(b, 1)]
    assert all(r.k > 0 for r in schedule.ranges)


def test_batch_sizes_between_measured_ones_are_interpolated_and_marked() -> None:
    runs = load_sweep()
    result = fitted(runs)
    schedule, _ = derive_schedule(runs, result.models, DRAFT, WEIGHTS, 4, BOOT)
    assert schedule is not None
    by = {(p.batch_size, p.k): p for p in schedule.predictions}
    for k in (2, 5):
        two, three, four = (by[(b, k)] for b in (2, 3, 4))
        assert (two.measured, three.measured, four.measured) == (True, False, True)
        lo, hi = sorted((two.e2e_speedup.estimate, four.e2e_speedup.estimate))
        assert lo < three.e2e_speedup.estimate < hi


def test_unmeasured_batch_sizes_are_held_and_said() -> None:
    runs = load_sweep((1, 2))
    result = fitted(runs)
    schedule, notes = derive_schedule(runs, result.models, DRAFT, WEIGHTS, 4, BOOT)
    assert schedule is not None
    assert schedule.batch_sizes == [1, 2]
    assert any("batch sizes 3-4 were not measured" in n for n in notes)
    assert schedule.ranges[-1].last == 4


def test_no_schedule_without_two_batch_sizes() -> None:
    runs = load_sweep((1,))
    result = fitted(runs)
    schedule, notes = derive_schedule(runs, result.models, DRAFT, WEIGHTS, 4, BOOT)
    assert schedule is None
    assert any("fewer than two batch sizes" in n for n in notes)


def test_the_interval_holds_the_estimate_and_widens_with_noise() -> None:
    runs = load_sweep()
    rng = np.random.default_rng(1)
    noisy = []
    for run in runs:
        classes = {}
        for name, c in run.classes.items():
            samples = []
            for s in c.samples:
                scale = float(rng.uniform(0.8, 1.2))
                times = [
                    s.chunk_times_s[0] + (t - s.chunk_times_s[0]) * scale for t in s.chunk_times_s
                ]
                samples.append(s.model_copy(update={"chunk_times_s": times}))
            classes[name] = c.model_copy(update={"samples": samples})
        noisy.append(run.model_copy(update={"classes": classes}))
    result = fitted(noisy)
    schedule, _ = derive_schedule(noisy, result.models, DRAFT, WEIGHTS, 4, BOOT)
    assert schedule is not None
    for r in schedule.ranges:
        i = r.predicted_speedup
        assert i.low is not None and i.high is not None
        assert i.low < i.estimate < i.high
        assert i.n == 8


def test_the_paste_line_deploys_the_schedule_through_the_cli_parser() -> None:
    runs = load_sweep()
    result = fitted(runs)
    add_schedule(result, 4, BOOT, None)
    schedule = result.schedule
    assert schedule is not None and schedule.overrides is not None
    args = config_parser("test", None).parse_args(shlex.split(schedule.overrides))
    config = config_from_arguments(args)
    assert config.serving.speculation_schedule == [tuple(e) for e in schedule.entries]
    predicted = config.guardrails.live.schedule_predicted_speedups
    assert predicted == pytest.approx(
        [r.predicted_speedup.estimate for r in schedule.ranges], rel=1e-3
    )
    max_k = max(k for _, _, k in schedule.entries)
    assert config.local.num_speculative_tokens == max_k
    command = render(config.local_serving_spec(Arm.SPECULATIVE, "/target", "/draft"))
    flag = command.flags()["--speculative-config"]
    assert flag is not None
    assert f'"num_speculative_tokens":{max_k}' in flag
    assert '"num_speculative_tokens_per_batch_size":' in flag


def test_where_the_engine_cannot_serve_it_there_is_no_paste_line() -> None:
    runs = load_sweep()
    result = fitted(runs)
    reason = rules.SCHEDULE_REFUSED[Generation.NEURON_PLUGIN]
    add_schedule(result, 4, BOOT, reason)
    assert result.schedule is not None and result.schedule.overrides is None
    assert any(reason in n for n in result.notes)


def test_the_summary_and_tune_md_show_each_range_with_its_gain_and_interval() -> None:
    runs = load_sweep()
    result = fitted(runs)
    add_schedule(result, 4, BOOT, None)
    schedule = result.schedule
    assert schedule is not None
    lines = summary_lines(result)
    for r in schedule.ranges:
        assert any(f"batch {r.first}-{r.last}: k={r.k}" in line for line in lines)
    assert f"paste (schedule): {schedule.overrides}" in lines
    markdown = render_markdown(result, [])
    assert "## Speculation schedule: a k per batch size" in markdown
    assert schedule.overrides in markdown
    assert "no k pays here: route these loads to the baseline" in markdown
