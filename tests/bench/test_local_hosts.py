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
    assert "2026-11-27" in text and "step ratio 1.60 / 1.60" in text
    assert "each inside its predicted interval" in text
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
    assert "NOT all inside their predicted intervals" in readme_local_expected(records)
    assert "**disagrees**" in local_hosts(records)


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
