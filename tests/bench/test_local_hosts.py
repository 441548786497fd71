"""The hosts' list: every default local run with its step costs, and the relation the README
states instead of one run's figures (issue 33)."""

from __future__ import annotations

import pytest

from bench.figures.measure import add_host_run, host_run
from bench.figures.records import (
    FigureRecord,
    HostClassFigures,
    HostRun,
    Interval,
    LocalHostsFigures,
    Provenance,
    RecordMachine,
    load_records,
)
from bench.figures.regions import (
    STEP_RATIOS,
    RegionError,
    _ratio_speedup,
    cross_host_predictions,
    local_hosts,
    readme_local_expected,
)

CLASSES = ("structured", "open_ended")


def _costs(name: str, ratio: float, tau: float) -> HostClassFigures:
    base = 18.0
    return HostClassFigures(
        baseline_step_ms=base,
        speculative_step_ms=ratio * base,
        draft_cost_per_step_ms=(ratio - 1) * base,
        step_ratio=ratio,
        tokens_per_step=tau,
        baseline_ttft_ms=60.0,
        speculative_ttft_ms=75.0,
        output_tokens=128.0,
        predicted=Interval(estimate=3.0 if name == "structured" else 1.1, low=2.9, high=3.1, n=16),
        agrees=True,
    )


def _interval(estimate: float, half: float) -> Interval:
    return Interval(estimate=estimate, low=estimate - half, high=estimate + half, n=16)


def _run(date: str, structured: float, open_ended: float, costs: bool, **kw: object) -> HostRun:
    fields: dict[str, object] = {
        "record": "make-local",
        "source": "measured",
        "date": date,
        "commit": "abc1234",
        "machine": RecordMachine(cpu="CPU", cores=2, memory_bandwidth_gbs=20.0),
        "e2e_speedup": {
            "structured": Interval(
                estimate=structured, low=structured - 0.5, high=structured + 0.5, n=16
            ),
            "open_ended": Interval(
                estimate=open_ended, low=open_ended - 0.1, high=open_ended + 0.1, n=16
            ),
        },
        "acceptance_by_class": {"structured": 0.688, "open_ended": 0.137},
        "host_expectation": (
            {
                "structured": _costs("structured", 1.6, 5.8),
                "open_ended": _costs("open_ended", 1.6, 2.0),
            }
            if costs
            else None
        ),
    }
    return HostRun.model_validate({**fields, **kw})


def _hosts(*runs: HostRun) -> dict[str, FigureRecord]:
    record = FigureRecord(
        name="local-hosts",
        date="2026-11-27T00:00:00Z",
        machine=RecordMachine(cpu="CPU", cores=2),
        command="make local",
        remeasure="python -m bench.figures measure make-local",
        provenance=Provenance(kind="measured", commit="abc1234"),
        figures=LocalHostsFigures(runs=list(runs)),
    )
    return {"local-hosts": record}


def test_the_readme_states_the_range_over_every_run_and_the_newest_prediction() -> None:
    records = _hosts(
        _run("2026-11-25T00:00:00Z", 3.37, 1.26, costs=False),
        _run("2026-11-27T01:00:00Z", 3.25, 1.20, costs=True),
        _run(
            "2026-11-26T00:00:00Z",
            2.45,
            0.89,
            costs=False,
            source="reported",
            record="issue 33",
            commit=None,
        ),
    )
    text = readme_local_expected(records)
    assert "**2.45x-3.37x** on structured" in text and "**0.89x-1.26x** on open-ended" in text
    assert "3 default runs on record (2 measured" in text and "1 reported" in text
    assert "2026-11-27" in text and "explained by step ratios of 1.60 / 1.60" in text
    assert "each measured speedup within the interval its step costs explain" in text
    table = local_hosts(records)
    assert "issue 33 (reported)" in table and "not kept" in table
    assert "2026-11-25 make-local (measured, abc1234)" in table


def test_a_disagreeing_run_is_said_so() -> None:
    run = _run("2026-11-27T00:00:00Z", 3.25, 1.20, costs=True)
    assert run.host_expectation is not None
    run.host_expectation["open_ended"] = run.host_expectation["open_ended"].model_copy(
        update={"agrees": False}
    )
    records = _hosts(run)
    assert "NOT each measured speedup within what its step costs explain" in (
        readme_local_expected(records)
    )
    assert "**outside**" in local_hosts(records)


def test_without_a_measured_run_that_kept_its_costs_the_regions_refuse() -> None:
    records = _hosts(_run("2026-11-25T00:00:00Z", 3.37, 1.26, costs=False))
    with pytest.raises(RegionError, match="no measured run with step costs"):
        readme_local_expected(records)


def test_the_relation_grows_with_tokens_per_step_and_falls_with_the_step_ratio() -> None:
    run = _run("2026-11-27T00:00:00Z", 3.25, 1.20, costs=True)
    structured = [_ratio_speedup(run, "structured", r) for r in STEP_RATIOS]
    open_ended = [_ratio_speedup(run, "open_ended", r) for r in STEP_RATIOS]
    assert structured == sorted(structured, reverse=True)
    assert all(s > o for s, o in zip(structured, open_ended, strict=True))
    # At ratio 1 and one token per step the relation is the TTFT-only difference.
    assert run.host_expectation is not None
    flat = run.host_expectation["open_ended"].model_copy(update={"tokens_per_step": 1.0})
    run.host_expectation["open_ended"] = flat
    assert _ratio_speedup(run, "open_ended", 1.0) == pytest.approx(
        (60 + 127 * 18) / (75 + 127 * 18)
    )


def test_add_host_run_appends_once_and_takes_the_newest_run_for_the_list() -> None:
    records = load_records()
    hosts = records["local-hosts"]
    assert isinstance(hosts.figures, LocalHostsFigures)
    before = len(hosts.figures.runs)
    make_local = records["make-local"]
    later = make_local.model_copy(update={"date": "2099-01-01T00:00:00Z"})
    once = add_host_run(later, hosts)
    assert isinstance(once.figures, LocalHostsFigures)
    assert len(once.figures.runs) == before + 1 and once.date == later.date
    twice = add_host_run(later, once)
    assert isinstance(twice.figures, LocalHostsFigures)
    assert len(twice.figures.runs) == before + 1  # the same measurement is not listed twice
    assert host_run(later).record == "make-local"


def _with_costs(run: HostRun, name: str, **update: object) -> HostRun:
    assert run.host_expectation is not None
    costs = dict(run.host_expectation)
    costs[name] = costs[name].model_copy(update=update)
    return run.model_copy(update={"host_expectation": costs})


def _explained_at(run: HostRun, structured: float, open_ended: float) -> HostRun:
    """``run`` whose classes' own costs explain intervals around what the relation gives at
    the step ratios ``structured`` and ``open_ended``."""
    for name, ratio in (("structured", structured), ("open_ended", open_ended)):
        at = _ratio_speedup(run, name, ratio)
        run = _with_costs(
            run, name, predicted=Interval(estimate=at, low=at * 0.98, high=at * 1.02, n=16)
        )
    return run


def test_one_step_ratio_per_host_is_claimed_only_when_both_classes_allow_it() -> None:
    kept = _run("2026-11-27T00:00:00Z", 3.25, 1.20, costs=True)
    # Both classes' intervals explained around a step ratio of 1.6: one number fits both.
    shared = readme_local_expected(_hosts(_explained_at(kept, 1.6, 1.6)))
    assert "In 1 of 1 runs one step ratio lies within both classes' intervals" in shared
    assert "one number per host accounts for both classes (the kept point ratios" in shared
    # The opposite numbers: structured around a ratio of 1.2, open-ended around 2.4.
    text = readme_local_expected(_hosts(_explained_at(kept, 1.2, 2.4)))
    assert "In 0 of 1 runs one step ratio lies within both classes' intervals" in text
    assert "one number per host does not account for both classes (2026-11-27 make-local" in text
    assert "accounts for both classes" not in text


def test_the_prediction_before_the_load_is_counted_with_its_misses() -> None:
    old = _run("2026-11-26T00:00:00Z", 3.2, 1.2, costs=True)
    assert "No run on record was predicted before its load yet" in readme_local_expected(
        _hosts(old)
    )
    held = _with_costs(
        _run("2026-11-27T00:00:00Z", 3.25, 1.20, costs=True),
        "structured",
        predicted_before_load=3.1,
        calibrated_step_ratio=1.7,
        prediction_holds=True,
    )
    text = readme_local_expected(_hosts(old, held))
    assert "Predicted before the load in 1 class run on record: **missed 0**" in text
    assert "predicted before the load 3.10x, held" in local_hosts(_hosts(old, held))
    # The opposite: the structured prediction 2.10x against a measured 3.25x [2.75, 3.75].
    missed = _with_costs(held, "structured", predicted_before_load=2.1, prediction_holds=False)
    text = readme_local_expected(_hosts(old, missed))
    assert "**missed 1** (outside the measured interval): 2026-11-27 structured 2.10x" in text
    assert "predicted before the load 2.10x, **missed**" in local_hosts(_hosts(old, missed))


def test_each_run_is_predicted_from_the_others_and_a_miss_is_named() -> None:
    # measured as the relation gives at their own step ratio, 1.6 (_costs): 3.32x / 1.23x
    runs = [_run(f"2026-11-2{day}T00:00:00Z", 3.3, 1.23, costs=True) for day in (5, 6, 7)]
    found = cross_host_predictions(LocalHostsFigures(runs=runs))
    # every other run has step ratio 1.6: each run is predicted at the relation's 1.6
    assert len(found) == 6 and all(holds for *_, holds in found)
    assert found[0][2] == pytest.approx(_ratio_speedup(runs[1], "structured", 1.6))
    assert "misses **0 of 6**" in readme_local_expected(_hosts(*runs))
    # The opposite: a host twice as slow per speculative step, measured 1.5x / 0.6x.
    slow = _run("2026-11-28T00:00:00Z", 1.5, 0.6, costs=False, source="reported", commit=None)
    text = readme_local_expected(_hosts(*runs, slow))
    assert "misses **2 of 8**" in text
    assert "2026-11-28 structured" in text and "against 1.50x [1.00, 2.00]" in text
