"""bench.adaptive_k: the goals and the rendering are computed from the record's numbers, so
opposite numbers give opposite words; the paired statistics are the load test's. Synthetic
records only: the sweep itself runs on real vLLM (python -m bench.figures measure
adaptive-k), never here."""

from __future__ import annotations

import xml.etree.ElementTree as ElementTree

import pytest

from bench.adaptive_k import level_statistics, predicted, schedule_k
from bench.figures import rendered
from bench.figures.adaptive_k import (
    PLOT,
    goals,
    plot_svg,
    region_text,
    relative_error,
    same_k_text,
    wholly_above,
    wholly_below,
)
from bench.figures.records import (
    ROOT,
    AdaptiveKFigures,
    AdaptiveKLevel,
    FigureRecord,
    Interval,
    Provenance,
    RecordMachine,
    load_records,
)
from experiment.config import StatisticsConfig
from loadtest.records import RequestRecord
from loadtest.results import Interval as SummaryInterval
from tune.results import BatchPrediction, SpeculationSchedule

SCHEDULE = [(1, 3, 3), (4, 16, 0)]


def iv(estimate: float, low: float | None, high: float | None, n: int = 96) -> Interval:
    return Interval(estimate=estimate, low=low, high=high, n=n)


def level(
    concurrency: int,
    fixed: Interval,
    schedule: Interval,
    over_fixed: Interval,
    *,
    fit: bool = True,
    prediction: float | None = None,
) -> AdaptiveKLevel:
    k = schedule_k(SCHEDULE, concurrency)
    return AdaptiveKLevel(
        concurrency=concurrency,
        fit=fit,
        schedule_k=k,
        requests=96,
        failed={"baseline": 0, "fixed": 0, "schedule": 0},
        fixed_speedup=fixed,
        schedule_speedup=schedule,
        schedule_over_fixed=over_fixed,
        predicted_schedule=None if prediction is None else iv(prediction, None, None, 32),
        predicted_fixed=None,
        drafts={"fixed": 100.0, "schedule": 0.0 if k == 0 else 100.0},
        draft_tokens={"fixed": 200.0, "schedule": 0.0 if k == 0 else 300.0},
        load_average_1m=1.0,
        wall_s=30.0,
    )


def figures(levels: list[AdaptiveKLevel]) -> AdaptiveKFigures:
    return AdaptiveKFigures(
        draft="small",
        drafter="draft-model",
        fixed_k=2,
        schedule=SCHEDULE,
        schedule_max_k=3,
        max_num_seqs=16,
        fit_levels=[1, 4, 16],
        max_tokens=16,
        prompts=32,
        requests_per_prompt=3,
        block_requests=32,
        tolerance=0.15,
        wall_s=700.0,
        tuning_wall_s=300.0,
        tuning_server_starts=6,
        startup_s=50.0,
        sweep_wall_s=350.0,
        levels=levels,
    )


def record(f: AdaptiveKFigures) -> FigureRecord:
    return FigureRecord(
        name="adaptive-k",
        date="2026-11-28T17:00:00Z",
        machine=RecordMachine(
            cpu="AMD EPYC", cores=2, load_average_start=1.0, load_average_end=2.0
        ),
        command=".venv/bin/python -m bench.adaptive_k --out runs/figures/adaptive-k.json",
        remeasure="python -m bench.figures measure adaptive-k",
        provenance=Provenance(kind="measured", commit="abc1234"),
        figures=f,
    )


def good() -> AdaptiveKFigures:
    """The schedule pays where speculation pays and keeps the baseline's speed under load;
    predictions within the tolerance on the held-out levels."""
    return figures(
        [
            level(1, iv(1.5, 1.4, 1.6), iv(1.6, 1.5, 1.7), iv(1.06, 1.02, 1.1)),
            level(
                2,
                iv(1.3, 1.2, 1.4),
                iv(1.35, 1.25, 1.45),
                iv(1.03, 0.98, 1.08),
                fit=False,
                prediction=1.4,
            ),
            level(4, iv(1.05, 0.98, 1.12), iv(1.0, 0.95, 1.05), iv(0.97, 0.93, 1.01)),
            level(
                8,
                iv(0.85, 0.8, 0.9),
                iv(1.0, 0.96, 1.04),
                iv(1.18, 1.12, 1.24),
                fit=False,
                prediction=1.0,
            ),
            level(16, iv(0.7, 0.65, 0.75), iv(0.99, 0.95, 1.03), iv(1.4, 1.3, 1.5)),
        ]
    )


def bad() -> AdaptiveKFigures:
    """The opposite numbers: the schedule loses to the fixed k and the baseline somewhere,
    beats neither anywhere, and misses its prediction on a held-out level."""
    return figures(
        [
            level(1, iv(1.5, 1.4, 1.6), iv(1.3, 1.2, 1.4), iv(0.86, 0.8, 0.92)),
            level(
                2,
                iv(1.3, 1.2, 1.4),
                iv(1.0, 0.9, 1.1),
                iv(0.98, 0.9, 1.05),
                fit=False,
                prediction=1.4,
            ),
            level(4, iv(1.05, 0.98, 1.12), iv(0.9, 0.85, 0.95), iv(0.97, 0.93, 1.01)),
            level(
                8,
                iv(0.85, 0.8, 0.9),
                iv(0.98, 0.9, 1.02),
                iv(1.0, 0.97, 1.03),
                fit=False,
                prediction=1.0,
            ),
            level(16, iv(1.1, 1.05, 1.15), iv(0.97, 0.94, 1.01), iv(0.99, 0.95, 1.02)),
        ]
    )


def by_name(f: AdaptiveKFigures) -> dict[str, bool]:
    return {goal.name: goal.met for goal in goals(f)}


# --- the goals ------------------------------------------------------------------------------


def test_every_goal_is_met_on_good_numbers() -> None:
    assert by_name(good()) == {
        "never worse than the best fixed k": True,
        "never worse than the baseline": True,
        "better than the best fixed k somewhere": True,
        "better than the baseline somewhere": True,
        "predicted within 15% on the held-out levels": True,
    }


def test_every_goal_is_missed_on_the_opposite_numbers() -> None:
    assert by_name(bad()) == {
        "never worse than the best fixed k": False,
        "never worse than the baseline": False,
        "better than the best fixed k somewhere": False,
        "better than the baseline somewhere": True,  # concurrency 1: [1.2, 1.4]
        "predicted within 15% on the held-out levels": False,
    }
    texts = {goal.name: goal.text for goal in goals(bad())}
    assert texts["never worse than the best fixed k"] == (
        "wholly below 1 at concurrency 1 (0.86x [0.80, 0.92])"
    )
    assert texts["never worse than the baseline"] == (
        "wholly below 1 at concurrency 4 (0.90x [0.85, 0.95])"
    )
    assert texts["predicted within 15% on the held-out levels"] == (
        "1 of 2 held-out levels within (2: +40.0%, 8: +2.0%)"
    )


def test_an_interval_touching_1_is_within_the_noise_both_ways() -> None:
    touching = iv(0.95, 0.9, 1.0)
    assert not wholly_below(touching) and not wholly_above(iv(1.05, 1.0, 1.1))
    assert wholly_below(iv(0.9, 0.85, 0.99)) and wholly_above(iv(1.1, 1.01, 1.2))


def test_without_an_interval_never_worse_is_judged_on_the_estimate_and_better_is_not_claimed() -> (
    None
):
    assert wholly_below(iv(0.9, None, None)) and not wholly_below(iv(1.1, None, None))
    assert not wholly_above(iv(1.5, None, None))


def test_no_held_out_level_misses_the_prediction_goal() -> None:
    only_fit = figures([lv for lv in good().levels if lv.fit])
    goal = next(g for g in goals(only_fit) if g.name.startswith("predicted"))
    assert not goal.met and goal.text == "no held-out level was measured"


def test_relative_error_is_predicted_over_measured() -> None:
    lv = good().levels[1]  # predicted 1.4, measured 1.35
    assert relative_error(lv) == pytest.approx(1.4 / 1.35 - 1)
    assert relative_error(good().levels[0]) is None


# --- the inputs of the record ---------------------------------------------------------------


def test_the_schedule_k_and_its_prediction_by_batch_size() -> None:
    assert [schedule_k(SCHEDULE, b) for b in (1, 3, 4, 16)] == [3, 3, 0, 0]
    with pytest.raises(ValueError, match="does not cover batch size 17"):
        schedule_k(SCHEDULE, 17)
    found = SummaryInterval(estimate=1.3, low=1.2, high=1.4, n=32, confidence=0.95)
    schedule = SpeculationSchedule(
        draft="small",
        drafter="draft-model",
        batch_sizes=[1, 4],
        max_num_seqs=4,
        max_k=3,
        step_costs=[],
        predictions=[
            BatchPrediction(
                batch_size=2,
                k=3,
                e2e_speedup=found,
                output_throughput_tok_s=100.0,
                baseline_output_throughput_tok_s=80.0,
                measured=False,
            )
        ],
        ranges=[],
        overrides=None,
    )
    assert predicted(schedule, 2, 3) == iv(1.3, 1.2, 1.4, 32)
    # No k = 0 prediction (derived before k = 0 was priced as served): taken as the baseline.
    assert predicted(schedule, 2, 0) == iv(1.0, None, None, 0)
    assert predicted(schedule, 3, 3) is None
    # Derived now: k = 0 has its own prediction (the drafter still runs), used as it is.
    zero = SummaryInterval(estimate=0.8, low=0.7, high=0.9, n=32, confidence=0.95)
    priced = schedule.model_copy(
        update={
            "predictions": [
                *schedule.predictions,
                schedule.predictions[0].model_copy(update={"k": 0, "e2e_speedup": zero}),
            ]
        }
    )
    assert predicted(priced, 2, 0) == iv(0.8, 0.7, 0.9, 32)


def _records(arm: str, e2e: list[float | None]) -> list[RequestRecord]:
    out = [RequestRecord(arm=arm, index=-1, prompt_id="w", prompt_class="s", warmup=True)]
    for index, seconds in enumerate(e2e):
        out.append(
            RequestRecord(
                arm=arm,
                index=index,
                prompt_id=f"p{index}",
                prompt_class="structured" if index % 2 else "open_ended",
                e2e_s=seconds,
                error=None if seconds is not None else "timeout",
            )
        )
    return out


def test_level_statistics_pair_the_requests_every_policy_served() -> None:
    base: list[float | None] = [1.0, 2.0, 1.5, 3.0, 2.5, 1.2, 9.0, 2.2]
    # index 6 failed under the fixed k: left out of every comparison
    fixed: list[float | None] = [0.5, 1.0, 1.0, 2.0, 2.0, 1.0, None, 2.0]
    schedule: list[float | None] = [0.5, 1.0, 0.9, 1.5, 1.5, 0.8, 1.0, 1.6]
    records = {
        "baseline": _records("baseline", list(base)),
        "fixed": _records("fixed", list(fixed)),
        "schedule": _records("schedule", list(schedule)),
    }
    settings = StatisticsConfig(resamples=500)
    n, found = level_statistics(records, settings)
    kept = [i for i in range(8) if i != 6]

    def ratio(a: list[float | None], b: list[float | None]) -> float:
        return sum(a[i] or 0.0 for i in kept) / sum(b[i] or 0.0 for i in kept)

    assert n == 7
    assert found["fixed"].estimate == pytest.approx(ratio(base, fixed))
    assert found["schedule"].estimate == pytest.approx(ratio(base, schedule))
    assert found["schedule_over_fixed"].estimate == pytest.approx(ratio(fixed, schedule))
    for interval in found.values():
        assert interval.n == 7 and interval.low is not None and interval.high is not None
        assert interval.low <= interval.estimate <= interval.high


# --- the rendering --------------------------------------------------------------------------


def test_the_region_says_met_on_good_numbers() -> None:
    text = region_text(record(good()), good())
    assert "**small k=2**" in text and "**[[1, 3, 3], [4, 16, 0]]**" in text
    assert "| 2 (held out) | 3 | 1.30x [1.20, 1.40] | 1.35x [1.25, 1.45] |" in text
    assert "| 1.40x [no interval] | +3.7% |" in text
    assert "| 16 (fit) | 0 |" in text and "1.00x [no interval]" in text  # k = 0, priced
    assert "| 2.00 / no drafts |" in text  # k = 0 at 16: the schedule server drafted nothing
    assert "**missed**" not in text and text.count("**met**") == 5
    assert "n = 96 requests served by all three per level" in text
    assert "![Speedup over the baseline by concurrency" in text
    assert "(records/adaptive-k.svg)" in text
    assert (
        "Break-even (point estimates, linear between levels): the fixed k (small k=2) stops "
        "paying above ~5.0 concurrent requests; the schedule stops paying above ~8.0 "
        "concurrent requests." in text
    )


def test_the_region_says_missed_on_the_opposite_numbers() -> None:
    text = region_text(record(bad()), bad())
    assert text.count("**missed**") == 4 and text.count("**met**") == 1
    assert (
        "- The schedule never worse than the best fixed k: **missed** (wholly below 1 at "
        "concurrency 1 (0.86x [0.80, 0.92]))." in text
    )
    assert "| +40.0% |" in text


@pytest.mark.parametrize(
    ("estimates", "words"),
    [
        ([1.5, 1.3, 1.1, 1.05, 1.01], "pays at every level measured"),
        ([0.9, 0.8, 0.7, 0.6, 0.5], "pays at no level measured"),
        ([1.5, 1.3, 1.1, 0.9, 0.5], "stops paying above ~6.0 concurrent requests"),
        (
            [1.5, 0.9, 0.8, 0.9, 1.1],
            "stops paying above ~1.8 concurrent requests (and pays again at concurrency 16)",
        ),
        ([0.9, 1.1, 1.05, 0.9, 0.8], "pays only at concurrency 2, 4"),
    ],
)
def test_the_break_even_words_follow_the_numbers(estimates: list[float], words: str) -> None:
    levels = [
        level(c, iv(e, e - 0.05, e + 0.05), iv(1.0, 0.95, 1.05), iv(1.0, 0.95, 1.05))
        for c, e in zip((1, 2, 4, 8, 16), estimates, strict=True)
    ]
    f = figures(levels)
    assert f"the fixed k (small k=2) {words}" in region_text(record(f), f)


def test_the_plot_is_svg_drawn_from_the_numbers() -> None:
    svg = plot_svg(good())
    assert svg == plot_svg(good())  # rendered and checked byte for byte
    root = ElementTree.fromstring(svg)
    ns = "{http://www.w3.org/2000/svg}"
    lines = root.findall(f"{ns}polyline")
    assert len(lines) == 2  # fixed k and schedule; the baseline is the dashed line at 1
    assert len(lines[0].attrib["points"].split()) == 5
    assert len(root.findall(f"{ns}circle")) == 10
    # the held-out levels' predictions (the fit levels have none here) and the legend's
    assert len(list(root.iter(f"{ns}polygon"))) == 2 + 1
    labels = [t.text for t in root.iter(f"{ns}text")]
    assert {"fixed k=2", "schedule", "schedule predicted", "baseline"} <= set(labels)
    x_axis = [t.text for t in root.iter(f"{ns}text") if t.attrib.get("text-anchor") == "middle"]
    assert [label for label in x_axis if label and label.isdigit()] == ["1", "2", "4", "8", "16"]
    assert plot_svg(bad()) != svg


def test_the_figures_render_writes_the_region_and_the_plot_from_the_record() -> None:
    records = load_records()
    records["adaptive-k"] = record(bad())
    fresh = rendered(records=records)
    assert fresh[ROOT / PLOT] == plot_svg(bad())
    tuning = fresh[ROOT / "docs" / "tuning.md"]
    region = tuning.split("<!-- figures:adaptive-k -->")[1].split("<!-- /figures:adaptive-k -->")[0]
    assert region.count("**missed**") == 4
    assert "[adaptive-k](records/adaptive-k.json), measured at commit abc1234" in region


def test_a_record_that_took_k0_as_the_baseline_says_so() -> None:
    """Records derived before k = 0 was priced as served hold 1.0 with n = 0 there."""
    base = good()
    levels = [
        lv.model_copy(update={"predicted_schedule": iv(1.0, None, None, 0)})
        if lv.schedule_k == 0
        else lv
        for lv in base.levels
    ]
    old = base.model_copy(update={"levels": levels})
    text = region_text(record(old), old)
    assert "| 16 (fit) | 0 |" in text and "1.00x (k=0 taken as the baseline)" in text
    assert "1.00x (k=0 taken as the baseline)" not in region_text(record(base), base)


# --- levels where the schedule serves the fixed k's own k -----------------------------------


def _same_k(over_fixed: Interval) -> AdaptiveKFigures:
    """good(), with the fixed k at the schedule's k=3 of concurrency 1 and 2: there the two
    servers decode alike, and ``over_fixed`` is what they measured at concurrency 1."""
    found = good().model_copy(update={"fixed_k": 3})
    found.levels[0] = found.levels[0].model_copy(update={"schedule_over_fixed": over_fixed})
    return found


def test_better_than_the_fixed_k_is_not_claimed_where_both_serve_the_same_k() -> None:
    # 1.06x [1.02, 1.10] at concurrency 1 counted in good(), where the k differs (3 vs 2).
    assert by_name(good())["better than the best fixed k somewhere"]
    only_same = _same_k(iv(1.06, 1.02, 1.1))
    for lv in only_same.levels[2:]:  # the levels where the k differs: within the noise
        lv.schedule_over_fixed = iv(1.0, 0.95, 1.05)
    goal = next(g for g in goals(only_same) if g.name == "better than the best fixed k somewhere")
    assert not goal.met
    assert goal.text == (
        "the interval of schedule over fixed k lies wholly above 1 at no level where the k differs"
    )


def test_the_same_k_levels_say_whether_the_servers_differ_at_the_same_k() -> None:
    assert same_k_text(good()) is None  # the k differs at every level
    quiet = same_k_text(_same_k(iv(1.01, 0.97, 1.05)))
    assert quiet is not None and "within the noise at every such level" in quiet
    apart = same_k_text(_same_k(iv(1.06, 1.02, 1.1)))
    assert apart is not None and "beyond the noise at concurrency 1," in apart
    assert "is not the schedule's doing" in apart and "within the noise" not in apart
    text = region_text(record(_same_k(iv(1.06, 1.02, 1.1))), _same_k(iv(1.06, 1.02, 1.1)))
    assert apart in text
