"""The marked regions of README.md and docs/*.md and how each is rendered from its records.

A region is ``<!-- figures:NAME -->...<!-- /figures:NAME -->`` in a document; everything
between the markers is the output of ``REGIONS[NAME]`` and is rewritten by
``python -m bench.figures render``. A region may sit inside a paragraph (no newline
around it) or hold whole blocks (a newline after the opening marker).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from bench.figures.adaptive_k import plot_svg, region_text
from bench.figures.formatting import ci, dur, ms, pct, secs, x
from bench.figures.records import (
    BENCH_RESULT_FILES,
    LONE_P99_GOAL_MS,
    P99_GOAL_MS,
    RECORDS_DIR,
    ROOT,
    AdaptiveKFigures,
    ArmsSpreadFigures,
    BenchFigures,
    BenchPoint,
    BindingSpreadFigures,
    FigureRecord,
    GuardrailsDrillFigures,
    GuardrailsLifecycleFigures,
    HostClassFigures,
    HostRun,
    Interval,
    LifecycleTimeline,
    LocalHostsFigures,
    LocalRunFigures,
    MiniatureFigures,
    ReplayAccuracyFigures,
    ReplayPeerRun,
    ReplayPeersFigures,
    SendErrors,
    StatsSpeedFigures,
    TestSuiteFigures,
    TieredFigures,
    TuneFigures,
)
from loadtest.render.tiered import gateway_text
from loadtest.step_model import e2e_speedup

Records = dict[str, FigureRecord]
F = TypeVar("F")

REGION = re.compile(
    r"<!-- figures:(?P<name>[a-z0-9-]+) -->(?P<body>.*?)<!-- /figures:(?P=name) -->", re.S
)
CLASSES = ("structured", "open_ended")


class RegionError(ValueError):
    pass


def need(records: Records, name: str, kind: type[F]) -> tuple[FigureRecord, F]:
    """The record ``name`` and its figures, which must be of ``kind``."""
    record = records.get(name)
    if record is None:
        raise RegionError(
            f"no record {name!r} in {RECORDS_DIR.relative_to(ROOT)}/: measure it with "
            f"`python -m bench.figures measure {name}`"
        )
    if not isinstance(record.figures, kind):
        raise RegionError(f"record {name!r} holds {record.figures.kind} figures, not {kind}")
    return record, record.figures


def span(values: list[float], digits: int = 2) -> str:
    """ "0.02" when every value rounds alike, else "0.02-0.03"."""
    low, high = f"{min(values):.{digits}f}", f"{max(values):.{digits}f}"
    return low if low == high else f"{low}-{high}"


def _usd(value: float | None) -> str:
    # two significant figures: the price itself is nominal
    return "-" if value is None else f"${value:.3f}" if value < 0.1 else f"${value:.2f}"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def signed_pct(share: float) -> str:
    return f"{share * 100:+.1f}%"


def _lossless(f: LocalRunFigures) -> str:
    rate = f.lossless_exact_matches / f.lossless_prompts if f.lossless_prompts else 0.0
    return f"{rate:.0%} of {f.lossless_prompts} prompts ({f.max_tokens} tokens each)"


def _phases(f: LocalRunFigures) -> str:
    names = {
        "install": "install",
        "models": "model generation",
        "server_startup": "both servers' start-up",
        "load_test": "load test",
        "acceptance_by_class": "per-class acceptance",
    }
    parts = []
    for key, label in names.items():
        if key in f.phases_s:
            parts.append(f"{label} {secs(f.phases_s[key])}")
            if key == "models" and {"target", "draft"} <= f.phases_s.keys():
                parts[-1] += (
                    f" (target {secs(f.phases_s['target'])}, draft {secs(f.phases_s['draft'])})"
                )
    return ", ".join(parts)


def _caches(record: FigureRecord) -> str:
    off = "PIP_NO_CACHE_DIR=1" in record.command and "UV_NO_CACHE=1" in record.command
    return ", pip's and uv's download caches off" if off else ""


def _passed(f: TestSuiteFigures, lead: str) -> str:
    return "" if f.passed is None else f"{lead}{f.passed} tests passed"


# --- the regions -----------------------------------------------------------------------


def readme_times(records: Records) -> str:
    fresh_r, fresh = need(records, "make-local-fresh", LocalRunFigures)
    cached_r, cached = need(records, "make-local", LocalRunFigures)
    test_r, test = need(records, "make-test", TestSuiteFigures)
    ci_r, ci_run = need(records, "ci-run", TestSuiteFigures)
    return (
        f"`make local` takes **{dur(fresh.wall_s)} on a fresh clone** (measured end to end "
        f"on {fresh_r.day}, {fresh_r.machine.text()}{_caches(fresh_r)}: "
        f"{_phases(fresh)}) and **{dur(cached.wall_s)}** with the venv and models cached "
        f"({cached_r.day}); `make test` takes {dur(test.wall_s)} ({_passed(test, '')}"
        f"{', ' if test.passed is not None else ''}"
        f"cached models and venvs, {test_r.day}{_at_commit(test_r)}; "
        f"{dur(ci_run.wall_s)}{_passed(ci_run, ' and ')} "
        f"for `.ci/run` on a clean clone, which also installs both venvs and generates the "
        f"models, {ci_r.day}{_at_commit(ci_r)})"
    )


def _at_commit(record: FigureRecord) -> str:
    """The commit a suite ran on: the two suites' counts differ when they ran on different
    trees, and the reader should see why."""
    commit = record.provenance.commit
    return f", commit {commit}" if commit else ""


def readme_light_tiers(records: Records) -> str:
    lint_r, lint = need(records, "make-lint-fresh", TestSuiteFigures)
    fast_r, fast = need(records, "make-test-fast-fresh", TestSuiteFigures)
    return (
        f"On a fresh clone{_caches(fast_r)}, `make lint` took {dur(lint.wall_s)} "
        f"({lint_r.day}, {lint_r.machine.text()}{_at_commit(lint_r)}) and `make test-fast` "
        f"{dur(fast.wall_s)}{_passed(fast, ', ')} ({fast_r.day}, {fast_r.machine.text()}"
        f"{_at_commit(fast_r)}), installs included."
    )


# Step ratios the relation is tabled at: a speculative step's price in plain decode steps.
STEP_RATIOS = (1.4, 1.6, 1.8, 2.0, 2.2, 2.4)


def _hosts(records: Records) -> tuple[FigureRecord, LocalHostsFigures]:
    return need(records, "local-hosts", LocalHostsFigures)


def _newest_with_costs(h: LocalHostsFigures) -> HostRun:
    """The newest measured run that kept its step costs (loadtest.expected)."""
    kept = [r for r in h.runs if r.source == "measured" and r.host_expectation]
    if not kept:
        raise RegionError("record local-hosts has no measured run with step costs")
    return max(kept, key=lambda r: r.date)


def _range(runs: list[HostRun], name: str) -> str:
    values = [r.e2e_speedup[name].estimate for r in runs]
    return f"{min(values):.2f}x-{max(values):.2f}x"


def _ratio_speedup(run: HostRun, name: str, ratio: float) -> float:
    """The relation: the E2E speedup ``run``'s class would give on a host whose speculative
    step costs ``ratio`` plain steps (its other costs and tau as measured)."""
    assert run.host_expectation is not None
    c = run.host_expectation[name]
    return e2e_speedup(
        c.baseline_step_ms / 1000,
        ratio * c.baseline_step_ms / 1000,
        c.tokens_per_step,
        output_tokens=c.output_tokens,
        ttft_s=c.speculative_ttft_ms / 1000,
        baseline_ttft_s=c.baseline_ttft_ms / 1000,
    )


# The step ratios _implied_ratio searches.
IMPLIED_RANGE = (0.5, 10.0)


def _implied_ratio(reference: HostRun, name: str, speedup: float) -> float | None:
    """The step ratio at which ``reference``'s relation gives ``speedup`` (bisection: the
    relation falls as the ratio grows); None outside IMPLIED_RANGE."""
    low, high = IMPLIED_RANGE
    if not _ratio_speedup(reference, name, high) <= speedup <= _ratio_speedup(reference, name, low):
        return None
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (
            (middle, high) if _ratio_speedup(reference, name, middle) > speedup else (low, middle)
        )
    return (low + high) / 2


def _agreement(run: HostRun) -> str:
    assert run.host_expectation is not None
    verdicts = {c.agrees for c in run.host_expectation.values()}
    if verdicts == {True}:
        return "each measured speedup within the interval its step costs explain"
    if False in verdicts:
        return "NOT each measured speedup within what its step costs explain (docs/local-run.md)"
    return "without an interval to compare"


def readme_local_expected(records: Records) -> str:
    _, h = _hosts(records)
    run = _newest_with_costs(h)
    assert run.host_expectation is not None
    s, o = "structured", "open_ended"
    cs, co = run.host_expectation[s], run.host_expectation[o]
    measured = [r for r in h.runs if r.source == "measured"]
    reported = len(h.runs) - len(measured)
    return (
        f"**Expected locally** (`make local`): the models fix acceptance "
        f"({pct(run.acceptance_by_class[s])} structured, {pct(run.acceptance_by_class[o])} "
        f"open-ended: {cs.tokens_per_step:.2f} and {co.tokens_per_step:.2f} tokens per target "
        "step); the host fixes what a speculative step costs in plain decode steps (its step "
        "ratio: memory bandwidth against per-step overhead). Every run predicts its speedup "
        "before the load from a few single-stream requests to each arm, and prints the step "
        "ratio its own streams explain the measured speedup by. Over the "
        f"{len(h.runs)} default runs on record ({len(measured)} measured by `python -m "
        f"bench.figures measure`, {reported} reported by a user), the E2E speedup was "
        f"**{_range(h.runs, s)}** on structured prompts and **{_range(h.runs, o)}** on "
        f"open-ended ones. {_before_load_text(h)}{_cross_host_text(h)} The newest measured "
        f"run ({run.date[:10]}, {run.machine.text()}): **{x(run.e2e_speedup[s].estimate)}** "
        f"{ci(run.e2e_speedup[s])} / **{x(run.e2e_speedup[o].estimate)}** "
        f"{ci(run.e2e_speedup[o])} ({run.e2e_speedup[s].n} pairs each), explained by step "
        f"ratios of {cs.step_ratio:.2f} / {co.step_ratio:.2f} (its own step costs give "
        f"{x(cs.predicted.estimate)} {ci(cs.predicted)} / {x(co.predicted.estimate)} "
        f"{ci(co.predicted)}: {_agreement(run)}). On a host whose step ratio is "
        f"{STEP_RATIOS[-1]:.1f} the same relation gives "
        f"{x(_ratio_speedup(run, s, STEP_RATIOS[-1]))} / "
        f"{x(_ratio_speedup(run, o, STEP_RATIOS[-1]))}.{_implied_text(h, run)} Per run and "
        "per step ratio: [docs/local-run.md](docs/local-run.md#the-machine-matters)."
    )


def _before_load_text(h: LocalHostsFigures) -> str:
    """How often the prediction made before each run's load missed its measured interval."""
    made = [
        (r, name, c)
        for r in h.runs
        if r.host_expectation
        for name, c in sorted(r.host_expectation.items())
        if c.predicted_before_load is not None and c.prediction_holds is not None
    ]
    if not made:
        return (
            "No run on record was predicted before its load yet (the calibration is newer "
            "than every record): their step costs explain, they do not predict."
        )
    missed = [(r, name, c) for r, name, c in made if not c.prediction_holds]
    text = (
        f"Predicted before the load in {len(made)} class run{'' if len(made) == 1 else 's'} "
        f"on record: **missed {len(missed)}** (outside the measured interval)"
    )
    if missed:
        text += ": " + ", ".join(
            f"{r.date[:10]} {name} {x(c.predicted_before_load or 0.0)} against "
            f"{x(r.e2e_speedup[name].estimate)} {ci(r.e2e_speedup[name])}"
            for r, name, c in missed
        )
    return text + "."


def _step_ratio(run: HostRun, name: str, reference: HostRun) -> float | None:
    """A run's step ratio of a class: its own, else what ``reference``'s relation implies."""
    if run.host_expectation and name in run.host_expectation:
        return run.host_expectation[name].step_ratio
    return _implied_ratio(reference, name, run.e2e_speedup[name].estimate)


def cross_host_predictions(h: LocalHostsFigures) -> list[tuple[HostRun, str, float, bool]]:
    """Each run predicted from the others on record, as a newcomer reads the README before
    running: the median step ratio of the other runs (their own, or what the relation
    implies) through the relation of the newest other run that kept its costs. (run, class,
    predicted, inside the run's measured interval); a run without such a reference or
    without two other runs is left out."""
    out = []
    for run in h.runs:
        others = [r for r in h.runs if r is not run]
        kept = [r for r in others if r.source == "measured" and r.host_expectation]
        if len(others) < 2 or not kept:
            continue
        reference = max(kept, key=lambda r: r.date)
        for name in CLASSES:
            ratios = sorted(
                ratio for r in others if (ratio := _step_ratio(r, name, reference)) is not None
            )
            measured = run.e2e_speedup[name]
            if not ratios or measured.low is None or measured.high is None:
                continue
            middle = len(ratios) // 2
            median = (
                ratios[middle] if len(ratios) % 2 else (ratios[middle - 1] + ratios[middle]) / 2
            )
            predicted = _ratio_speedup(reference, name, median)
            out.append((run, name, predicted, measured.low <= predicted <= measured.high))
    return out


def _cross_host_text(h: LocalHostsFigures) -> str:
    found = cross_host_predictions(h)
    if not found:
        return ""
    missed = [(r, name, p) for r, name, p, holds in found if not holds]
    errors = [p / r.e2e_speedup[name].estimate - 1 for r, name, p, _ in found]
    text = (
        f" Predicting each run from the others on record (their median step ratio through "
        f"the relation) misses **{len(missed)} of {len(found)}** class runs' measured "
        f"intervals (errors {signed_pct(min(errors))} to {signed_pct(max(errors))})"
    )
    if missed:
        text += ": " + ", ".join(
            f"{r.date[:10]} {name} {x(p)} against {x(r.e2e_speedup[name].estimate)} "
            f"{ci(r.e2e_speedup[name])}"
            for r, name, p in missed
        )
    return text + "."


def _ratio_interval(run: HostRun, name: str, reference: HostRun) -> tuple[float, float]:
    """The step ratios a run's class is consistent with: the interval its own step costs
    explain through its own relation, else its measured interval through ``reference``'s
    (the relation falls as the ratio grows, so an interval's high end gives the low ratio;
    beyond IMPLIED_RANGE the bound is its edge)."""
    if run.host_expectation and name in run.host_expectation:
        through, interval = run, run.host_expectation[name].predicted
    else:
        through, interval = reference, run.e2e_speedup[name]
    high = interval.high if interval.high is not None else interval.estimate
    low = interval.low if interval.low is not None else interval.estimate
    lowest, highest = _implied_ratio(through, name, high), _implied_ratio(through, name, low)
    return (
        IMPLIED_RANGE[0] if lowest is None else lowest,
        IMPLIED_RANGE[1] if highest is None else highest,
    )


def one_ratio_per_host(h: LocalHostsFigures, reference: HostRun) -> list[tuple[HostRun, bool]]:
    """Per run: whether one step ratio lies within both classes' intervals (one number for
    the host accounts for both classes) or not."""
    out = []
    for run in h.runs:
        (s_low, s_high), (o_low, o_high) = (_ratio_interval(run, n, reference) for n in CLASSES)
        out.append((run, max(s_low, o_low) <= min(s_high, o_high)))
    return out


def _implied_text(h: LocalHostsFigures, reference: HostRun) -> str:
    """Whether one step ratio per host accounts for both classes, run by run."""
    found = one_ratio_per_host(h, reference)
    shared = [r for r, ok in found if ok]
    apart = [r for r, ok in found if not ok]
    text = (
        f" In {len(shared)} of {len(found)} runs one step ratio lies within both classes' "
        "intervals (those their own step costs explain or, where none were kept, the measured "
        "ones through the relation)"
    )
    gaps = [
        (abs(a - b), r)
        for r in h.runs
        if r.host_expectation and all(n in r.host_expectation for n in CLASSES)
        for a, b in [tuple(r.host_expectation[n].step_ratio for n in CLASSES)]
    ]
    widest = ""
    if gaps:
        gap, run = max(gaps, key=lambda g: g[0])
        widest = f" (the kept point ratios differ by up to {gap:.2f}, {run.date[:10]})"
    if not apart:
        return text + f": one number per host accounts for both classes{widest}."
    detail = "; ".join(
        f"{r.date[:10]} {r.record}: structured "
        + " / open-ended ".join(
            "{:.2f}-{:.2f}".format(*_ratio_interval(r, n, reference)) for n in CLASSES
        )
        for r in apart
    )
    if not shared:
        return text + f": one number per host does not account for both classes ({detail})."
    return text + (
        f"; in the other {len(apart)} the two classes need different step ratios ({detail}), "
        "so one number per host does not account for both classes there."
    )


def _verdict(costs: HostClassFigures) -> str:
    """Whether a class's measured speedup lies inside what its own step costs explain."""
    return {True: "within", False: "**outside**", None: "no interval"}[costs.agrees]


def _cell(run: HostRun, name: str) -> str:
    measured = run.e2e_speedup[name]
    text = f"{x(measured.estimate)} {ci(measured)}"
    if run.host_expectation and name in run.host_expectation:
        c = run.host_expectation[name]
        if c.predicted_before_load is not None:
            held = {True: "held", False: "**missed**", None: "not compared"}[c.prediction_holds]
            text += f"; predicted before the load {x(c.predicted_before_load)}, {held}"
        text += (
            f"; explained by step ratio {c.step_ratio:.2f}: {x(c.predicted.estimate)} "
            f"{ci(c.predicted)}, {_verdict(c)}"
        )
    return text


def _costs(run: HostRun, reference: HostRun) -> str:
    if not run.host_expectation:
        implied = [_implied_ratio(reference, n, run.e2e_speedup[n].estimate) for n in CLASSES]
        shown = " / ".join("-" if r is None else f"{r:.2f}" for r in implied)
        return f"not kept; the relation implies a step ratio of {shown}"
    return " / ".join(
        f"{c.baseline_step_ms:.1f} ms, {c.step_ratio:.2f}"
        for c in (run.host_expectation[n] for n in CLASSES if n in run.host_expectation)
    )


def local_hosts(records: Records) -> str:
    """Every default local run on record and the relation its step costs give (issue 33)."""
    _, h = _hosts(records)
    run = _newest_with_costs(h)
    rows = [
        "| run | host | baseline step, step ratio (structured / open-ended) | structured "
        "E2E [95% CI] | open-ended E2E [95% CI] |",
        "| --- | --- | --- | --- | --- |",
    ]
    for r in sorted(h.runs, key=lambda r: r.date):
        where = f"{r.record} ({r.source}"
        where += f", {r.commit})" if r.commit else ")"
        rows.append(
            f"| {r.date[:10]} {where} | {r.machine.text()} | {_costs(r, run)} | "
            f"{_cell(r, 'structured')} | {_cell(r, 'open_ended')} |"
        )
    notes = [f"- {r.record}: {r.note}" for r in h.runs if r.note]
    relation = [
        "| step ratio | " + " | ".join(f"{ratio:.1f}" for ratio in STEP_RATIOS) + " |",
        "| --- |" + " --- |" * len(STEP_RATIOS),
        *(
            f"| {name.replace('_', '-')} E2E | "
            + " | ".join(x(_ratio_speedup(run, name, ratio)) for ratio in STEP_RATIOS)
            + " |"
            for name in CLASSES
        ),
    ]
    return "\n".join(
        [
            "",
            *rows,
            "",
            *notes,
            *([""] if notes else []),
            f"The relation, from the newest measured run's own costs ({run.date[:10]}: its "
            "baseline step, TTFTs, output length and tokens per step) with the speculative "
            "step set to each ratio of plain steps (loadtest/step_model.py `e2e_speedup`):",
            "",
            *relation,
            "",
        ]
    )


def binding_spread(records: Records) -> str:
    """The default local run under each core placement, against the spread between hosts."""
    record, b = need(records, "binding-spread", BindingSpreadFigures)
    _, h = _hosts(records)
    reference = _newest_with_costs(h)
    rows = [
        "| local.cpu_binding | baseline step | step ratio (structured / open-ended) | "
        "structured E2E [95% CI] | open-ended E2E [95% CI] | explained by the step ratio "
        "(structured / open-ended) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for run in b.runs:
        c = run.host_expectation
        rows.append(
            f"| {run.binding}{'' if run.ok else ' (run failed its checks)'} | "
            f"{c['structured'].baseline_step_ms:.1f} ms | {c['structured'].step_ratio:.2f} / "
            f"{c['open_ended'].step_ratio:.2f} | {x(run.e2e_speedup['structured'].estimate)} "
            f"{ci(run.e2e_speedup['structured'])} | {x(run.e2e_speedup['open_ended'].estimate)} "
            f"{ci(run.e2e_speedup['open_ended'])} | "
            + " / ".join(f"{x(c[n].predicted.estimate)} {_verdict(c[n])}" for n in CLASSES)
            + " |"
        )
    ratios = [r.host_expectation["structured"].step_ratio for r in b.runs]
    per_binding = "; ".join(
        f"{binding} "
        + span(
            [r.host_expectation["structured"].step_ratio for r in b.runs if r.binding == binding]
        )
        for binding in b.bindings()
    )
    hosts = [
        ratio
        for r in h.runs
        for ratio in (
            [r.host_expectation["structured"].step_ratio]
            if r.host_expectation
            else [_implied_ratio(reference, "structured", r.e2e_speedup["structured"].estimate)]
        )
        if ratio is not None
    ]
    return "\n".join(
        [
            "",
            f"{record.day}, {record.machine.text()}, "
            f"{len(b.runs) // max(len(b.bindings()), 1)} run(s) per binding, interleaved:",
            "",
            *rows,
            "",
            _binding_verdict(b, ratios, per_binding, hosts, record.machine.cores),
            "",
        ]
    )


def _binding_verdict(
    b: BindingSpreadFigures,
    ratios: list[float],
    per_binding: str,
    hosts: list[float],
    cores: int,
) -> str:
    """Whether the core placement moves the step ratio beyond the run-to-run noise."""
    by_binding = {
        binding: [
            r.host_expectation["structured"].step_ratio for r in b.runs if r.binding == binding
        ]
        for binding in b.bindings()
    }
    within = max(max(v) - min(v) for v in by_binding.values())
    means = {binding: sum(v) / len(v) for binding, v in by_binding.items()}
    between = max(means.values()) - min(means.values())
    explained = (
        f"Each run's own step costs explain its speedup within their interval in "
        f"{sum(bool(c.agrees) for r in b.runs for c in r.host_expectation.values())} of "
        f"{sum(len(r.host_expectation) for r in b.runs)} class runs above (an explanation, "
        "not a prediction: the costs are read off the same run)."
    )
    text = (
        f"Over the {len(ratios)} runs on this host the structured step ratio was "
        f"{min(ratios):.2f}-{max(ratios):.2f} ({per_binding}); the default runs on record span "
        f"{min(hosts):.2f}-{max(hosts):.2f} (measured or implied, record local-hosts). "
    )
    if not all(len(v) > 1 for v in by_binding.values()):
        return text + (
            f"The bindings' means differ by {between:.2f}, the rounds of one binding by up to "
            f"{within:.2f}: with one run of some binding the run-to-run noise is not measured "
            f"for it, so this record cannot tell the core placement from the noise. {explained}"
        )
    if within >= between:
        return text + (
            f"The rounds of one binding differ by up to {within:.2f}, the bindings' means by "
            f"{between:.2f}: no binding stands out of the run-to-run noise, so on {cores} cores "
            f"the core placement is not a part of the spread the default could remove. "
            f"{explained}"
        )
    lowest = min(means, key=lambda k: means[k])
    return text + (
        f"The bindings' means differ by {between:.2f}, more than the rounds of one binding "
        f"(up to {within:.2f}): on {cores} cores the core placement moves the step ratio beyond "
        f"the run-to-run noise, and `{lowest}` gives the lowest ({means[lowest]:.2f} on "
        f"average). {explained}"
    )


def _point(b: BenchFigures, level: int, instrument: str) -> BenchPoint:
    try:
        return b.point(level, instrument)
    except KeyError as err:
        raise RegionError(
            f"{err.args[0]}: run the whole bench (python -m bench.figures measure bench)"
        ) from err


def readme_bench(records: Records) -> str:
    _, b = need(records, "bench", BenchFigures)
    ours64 = _point(b, 64, "locust_p1")
    vllm64 = _point(b, 64, "vllm")
    aiperf64 = _point(b, 64, "aiperf")
    ours256 = _point(b, 256, "locust_p1")
    workers256 = _point(b, 256, "locust_p2")
    return (
        f"At 64 concurrent streams from one Locust process on a {records['bench'].machine.cores}"
        f"-core machine, TTFT error p99 is {ms(ours64.ttft_ms[1])} and per-token ITL error p99 "
        f"{ms(ours64.itl_token_ms[1])} (`vllm bench serve` on the same workload: "
        f"{ms(vllm64.ttft_ms[1])} and {ms(vllm64.itl_token_ms[1])}, its ITL: "
        f"{_itl_kind(vllm64)}; AIPerf: "
        f"{ms(aiperf64.ttft_ms[1])} and {ms(aiperf64.itl_token_ms[1])}, "
        f"{_itl_kind(aiperf64)}); at 256 streams, TTFT and "
        f"per-token ITL error p99 are {ms(ours256.ttft_ms[1])} and "
        f"{ms(ours256.itl_token_ms[1])} from one process and {ms(workers256.ttft_ms[1])} and "
        f"{ms(workers256.itl_token_ms[1])} from two workers sharing the cores with the server "
        f"(median of {b.repetitions} repetitions, {records['bench'].day})"
    )


def _margin_text(margin: Interval | None, runner_up: str | None) -> str:
    """A head-to-head margin: "faster" only when its interval excludes 1 (an interval that
    holds 1 cannot tell the two apart, whatever its estimate)."""
    if margin is None:
        return ""
    if margin.low is not None and margin.low > 1:
        return f" ({x(margin.estimate)} {ci(margin)} faster than {runner_up})"
    if margin.high is not None and margin.high < 1:
        return f" ({x(margin.estimate)} {ci(margin)}: slower than {runner_up})"
    return f" ({x(margin.estimate)} {ci(margin)}: can't tell apart from {runner_up})"


def readme_tune(records: Records) -> str:
    r, t = need(records, "tune-sweep", TuneFigures)
    errors = [p.relative_error for p in t.held_out]
    within = sum(p.within_tolerance for p in t.held_out)
    drafters = sorted({m.drafter for m in t.fits})
    choice = ""
    if len(drafters) > 1:
        picks = ", ".join(
            f"{d.scope} {d.draft} k={d.k}" + _margin_text(d.margin, d.runner_up_draft)
            for d in t.drafter_choices
        )
        choice = f"; comparing {' and '.join(drafters)} it chose {picks}"
    return (
        f"held-out prediction errors {signed_pct(min(errors))} to {signed_pct(max(errors))}, "
        f"the {t.tolerance:.0%} goal met for {within} of {len(t.held_out)} held-out points"
        f"{choice} (the sweep of {r.day}, {r.provenance.text()})"
    )


def local_run_expected(records: Records) -> str:
    fresh_r, f = need(records, "make-local-fresh", LocalRunFigures)
    cached_r, c = need(records, "make-local", LocalRunFigures)
    s, o = "structured", "open_ended"
    burst = f.burst_gap_fraction
    base, spec = burst.get("baseline"), burst.get("speculative")
    rows = [
        "| | structured | open-ended | goal |",
        "| --- | --- | --- | --- |",
        f"| E2E mean speedup SD vs baseline [95% CI], n pairs | **{x(f.e2e_speedup[s].estimate)}"
        f"** {ci(f.e2e_speedup[s])}, {f.e2e_speedup[s].n} | **{x(f.e2e_speedup[o].estimate)}** "
        f"{ci(f.e2e_speedup[o])}, {f.e2e_speedup[o].n} | >= 2.0x / 0.8x-1.25x |",
        f"| TTFT mean speedup [95% CI] | **{x(f.ttft_speedup[s].estimate)}** "
        f"{ci(f.ttft_speedup[s])} | **{x(f.ttft_speedup[o].estimate)}** "
        f"{ci(f.ttft_speedup[o])} | 0.75x-1.33x |",
        f"| acceptance rate ({f.acceptance_by_class_source}) | "
        f"**{pct(f.acceptance_by_class[s])}** | "
        f"**{pct(f.acceptance_by_class[o])}** | >= 60% / <= 35% |",
        f"| lossless exact-match | {_lossless(f)} | | 100% |",
        f"| share of baseline chunk gaps < 0.1 ms | "
        f"{'-' if base is None else pct(base)} overall (SD "
        f"{'-' if spec is None else pct(spec)}) | | < 5% |",
    ]
    return "\n".join(
        [
            f"A fresh clone, {fresh_r.day}, {fresh_r.machine.text()} (the load average counts "
            "vLLM's own threads):",
            "",
            "```bash",
            fresh_r.command,
            "```",
            "",
            *rows,
            "",
            f"Wall time **{dur(f.wall_s)}** (goal: 8 min): {_phases(f)}.",
            "",
            f"`make local` again with the venv and models cached ({cached_r.day}, "
            f"{cached_r.machine.text()}): **{dur(c.wall_s)}** (goal: 4 min), E2E "
            f"**{x(c.e2e_speedup[s].estimate)}** structured and **{x(c.e2e_speedup[o].estimate)}"
            f"** open-ended, TTFT {x(c.ttft_speedup[s].estimate)} / "
            f"{x(c.ttft_speedup[o].estimate)}, acceptance {pct(c.acceptance_by_class[s])} / "
            f"{pct(c.acceptance_by_class[o])}, lossless "
            f"{c.lossless_exact_matches}/{c.lossless_prompts}.",
        ]
    )


def tune_sweep(records: Records) -> str:
    r, t = need(records, "tune-sweep", TuneFigures)
    rows = [
        "| draft / class | held-out k | predicted | measured (95% CI, n) | error "
        "| tau pred / measured | T(k) ms pred / measured |",
        "|---|---|---|---|---|---|---|",
    ]
    for p in sorted(t.held_out, key=lambda p: (p.draft, p.prompt_class, p.k)):
        tau = f"{p.tau[0]:.2f} / {p.tau[1]:.2f}" if p.tau else "-"
        step = f"{p.step_ms[0]:.1f} / {p.step_ms[1]:.1f}" if p.step_ms else "-"
        rows.append(
            f"| {p.draft} / {p.prompt_class} | {p.k} | {x(p.predicted)} | "
            f"{x(p.measured.estimate)} {ci(p.measured)}, {p.measured.n} | "
            f"{signed_pct(p.relative_error)} | {tau} | {step} |"
        )
    errors = [p.relative_error for p in t.held_out]
    within = sum(p.within_tolerance for p in t.held_out)
    tau_errors = [abs(p.tau[0] - p.tau[1]) / p.tau[1] for p in t.held_out if p.tau]
    tau_text = f"; tokens per step within {max(tau_errors):.1%} everywhere" if tau_errors else ""
    recs = []
    for rec in t.recommendations:
        measured = (
            f"measured {x(rec.measured.estimate)} {ci(rec.measured)} (n={rec.measured.n})"
            if rec.measured
            else "not measured"
        )
        recs.append(f"{rec.scope}: {rec.draft} k={rec.k}, predicted {x(rec.predicted)}, {measured}")
    note = f" {r.provenance.note}" if r.provenance.note else ""
    breaks = []
    for b in t.break_even:
        levels = ", ".join(f"{x(v)} at {c}" for c, v in sorted(b.speedup_by_concurrency.items()))
        where = (
            f"stops paying above ~{b.break_even_concurrency:.1f} concurrent requests"
            if b.break_even_concurrency is not None
            else "pays at every level measured"
        )
        breaks.append(f"{b.prompt_class} ({b.draft} k={b.k}) {where} ({levels})")
    cost = []
    if t.cost:
        label = "NOMINAL" if t.cost.nominal else "quoted"
        cost.append(
            f"Cost per 1M output tokens at the local price ({t.cost.instance_type}, "
            f"${t.cost.arm_usd_per_hour:.2f}/h, labelled {label}):"
        )
        for arm in t.cost.arms:
            concurrency = sorted(arm.by_concurrency)
            usd = " / ".join(
                _usd(arm.by_concurrency[c].usd_per_million_output_tokens) for c in concurrency
            )
            tok = " / ".join(
                _num(arm.by_concurrency[c].output_throughput_tok_s) for c in concurrency
            )
            best = (
                f", throughput-optimal at {arm.optimal_concurrency}"
                if arm.optimal_concurrency is not None
                else ""
            )
            cost.append(
                f"{arm.arm} {usd} at concurrency {' / '.join(map(str, concurrency))} ({tok} output "
                f"tokens/s{best});"
            )
        cost[-1] = cost[-1].rstrip(";") + "."
    return "\n".join(
        [
            f"`{r.command}` on {r.day}, {r.machine.text()}: **{dur(t.wall_s)} wall** "
            f"({t.server_starts} server starts); {r.provenance.text()}.{note}",
            "",
            *rows,
            "",
            f"**{within} of {len(t.held_out)} held-out k within the {t.tolerance:.0%} goal** "
            f"(errors {signed_pct(min(errors))} to {signed_pct(max(errors))}){tau_text}. "
            f"Recommendation: {'; '.join(recs)}."
            + (f" Break-even: {'; '.join(breaks)}." if breaks else ""),
            *(["", " ".join(cost)] if cost else []),
            *_drafters(t),
        ]
    )


def _positions(rates: list[float] | None) -> str:
    return "-" if not rates else " / ".join(f"{r:.2f}" for r in rates)


def _eagle3_run(records: Records) -> tuple[FigureRecord, LocalRunFigures]:
    """The local run with the EAGLE3 head as the drafter: record ``local-eagle3``."""
    r, f = need(records, "local-eagle3", LocalRunFigures)
    if f.drafter != "eagle3":
        raise RegionError(f"record 'local-eagle3' was run with drafter {f.drafter!r}")
    return r, f


def _tiered_run(records: Records) -> tuple[FigureRecord, TieredFigures, LocalRunFigures]:
    """The local run that drove the gateway as a third arm: record ``local-tiered``, its
    tiered arm's classes in the order the documents list them (structured first)."""
    r, f = need(records, "local-tiered", LocalRunFigures)
    if f.tiered is None:
        raise RegionError("record 'local-tiered' has no tiered arm: run with local.tiered=true")
    by_class = sorted(f.tiered.by_class, key=lambda c: c.prompt_class, reverse=True)
    return r, f.tiered.model_copy(update={"by_class": by_class}), f


def local_eagle3(records: Records) -> str:
    """The local run with the EAGLE3 head as the drafter (issue 26's served goals)."""
    r, f = _eagle3_run(records)
    s, o = "structured", "open_ended"
    failed = sum(f.failed_requests.values())
    rows = [
        "| | structured | open-ended | goal |",
        "| --- | --- | --- | --- |",
        f"| E2E mean speedup EAGLE3 vs baseline [95% CI], n pairs | "
        f"**{x(f.e2e_speedup[s].estimate)}** {ci(f.e2e_speedup[s])}, {f.e2e_speedup[s].n} | "
        f"**{x(f.e2e_speedup[o].estimate)}** {ci(f.e2e_speedup[o])}, {f.e2e_speedup[o].n} | "
        ">= 1.5x structured |",
        f"| TTFT mean speedup [95% CI] | {x(f.ttft_speedup[s].estimate)} {ci(f.ttft_speedup[s])}"
        f" | {x(f.ttft_speedup[o].estimate)} {ci(f.ttft_speedup[o])} | |",
        f"| acceptance rate ({f.acceptance_by_class_source}) | "
        f"**{pct(f.acceptance_by_class[s])}** | "
        f"**{pct(f.acceptance_by_class[o])}** | |",
        f"| lossless exact-match | {_lossless(f)} | | 100%, >= 32 prompts |",
    ]
    return "\n".join(
        [
            f"`{r.command}`, {r.day}, {r.machine.text()}, k = {f.k}:",
            "",
            *rows,
            "",
            "Per-position acceptance of the measured window, both classes, from the server's "
            "`vllm:spec_decode_num_accepted_tokens_per_pos` / `vllm:spec_decode_num_drafts`: "
            f"{_positions(f.acceptance_per_position)}. Failed requests: {failed}. Wall time "
            f"{dur(f.wall_s)}: {_phases(f)}"
            + (
                f"; the head had trained in {dur(f.drafter_generation_s)} on "
                f"{r.machine.cores} cores when it was first made (goal: 2 min), cached since."
                if f.drafter_generation_s is not None
                else "."
            ),
        ]
    )


def local_tiered(records: Records) -> str:
    """The local run with the gateway driven as the third arm (issue 24's local goal)."""
    r, t, f = _tiered_run(records)
    rows = [
        "| class | routed to | tiered vs baseline [95% CI], n | tiered vs SD [95% CI] "
        "| SD vs baseline [95% CI] | matches its arm |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for c in t.by_class:
        sd = c.speculative_vs_baseline
        held = {True: "yes", False: "**no**", None: "can't tell"}[c.held]
        rows.append(
            f"| {c.prompt_class} | {c.routed_to} | **{x(c.vs_baseline.estimate)}** "
            f"{ci(c.vs_baseline)}, {c.vs_baseline.n} | {x(c.vs_speculative.estimate)} "
            f"{ci(c.vs_speculative)} | {x(sd.estimate) + ' ' + ci(sd) if sd else '-'} | {held} |"
        )
    return "\n".join(
        [
            f"`{r.command}`, {r.day}, {r.machine.text()}:",
            "",
            *rows,
            "",
            f"Tiered lossless against the baseline: {t.lossless_exact_matches} of "
            f"{t.lossless_prompts} prompts exact; failed requests: tiered {t.failed_requests} "
            f"of {t.requests}, "
            + ", ".join(f"{arm} {n}" for arm, n in f.failed_requests.items() if arm != "tiered")
            + f". Wall time {dur(f.wall_s)}: {_phases(f)}.",
            "",
            _gateway_cost(t),
        ]
    )


def _gateway_cost(t: TieredFigures) -> str:
    """The gateway's own cost during the tiered arm, or that the record has none."""
    if t.gateway is None:
        return (
            "The gateway's own cost (its CPU and added latency per request, and whether it "
            "shares a core with a server): not measured in this record."
        )
    text = gateway_text(t.gateway)
    return f"The {text[0].lower()}{text[1:]}."


def _gateway_brief(t: TieredFigures) -> str:
    cost = t.gateway
    if cost is None:
        return "the gateway's own cost not measured in this record"
    cpu = "n/a" if cost.cpu_ms_per_request is None else f"{cost.cpu_ms_per_request:.2f} ms"
    added = "n/a" if cost.added_ms_per_request is None else f"{cost.added_ms_per_request:.2f} ms"
    shared = cost.shared_with()
    where = (
        "on no server's core"
        if not shared
        else f"sharing a core with {' and '.join(shared)}"
        + (" (unavoidable on these cores)" if cost.must_share() else "")
    )
    return f"the gateway itself took {cpu} CPU and added {added} per request, {where}"


def readme_tiered(records: Records) -> str:
    r, t, _ = _tiered_run(records)
    parts = [
        f"{c.prompt_class} (to the {c.routed_to}) {x(c.vs_baseline.estimate)} "
        f"{ci(c.vs_baseline)} of the baseline"
        + (
            f", SD {x(c.speculative_vs_baseline.estimate)} {ci(c.speculative_vs_baseline)}"
            if c.speculative_vs_baseline
            else ""
        )
        for c in t.by_class
    ]
    held = all(c.held for c in t.by_class)
    matches = "each class matches the arm it is routed to" if held else "NOT every class matches"
    return (
        f"measured locally ({r.day}, {r.machine.text()}, n={t.by_class[0].vs_baseline.n} "
        f"per class): tiered E2E {'; '.join(parts)}; "
        f"{matches}, lossless {t.lossless_exact_matches}/{t.lossless_prompts}, "
        f"{t.failed_requests} failed requests; {_gateway_brief(t)}"
    )


def readme_eagle3(records: Records) -> str:
    r, f = _eagle3_run(records)
    s, o = "structured", "open_ended"
    trained = (
        f", the head trained in {dur(f.drafter_generation_s)}"
        if f.drafter_generation_s is not None
        else ""
    )
    return (
        f"measured {r.day} ({r.machine.text()}, k={f.k}): E2E **{x(f.e2e_speedup[s].estimate)}** "
        f"{ci(f.e2e_speedup[s])} structured and {x(f.e2e_speedup[o].estimate)} "
        f"{ci(f.e2e_speedup[o])} open-ended ({f.e2e_speedup[s].n} pairs each), acceptance "
        f"{pct(f.acceptance_by_class[s])} / {pct(f.acceptance_by_class[o])}, lossless "
        f"{f.lossless_exact_matches}/{f.lossless_prompts}{trained}"
    )


def _drafters(t: TuneFigures) -> list[str]:
    """The drafter comparison of a sweep: per (draft, class) acceptance per position and the
    draft cost per step, then the drafter chosen per class with its margin."""
    if not t.fits:
        return []
    rows = [
        "",
        "| draft (drafter) / class | acceptance per position (fitted from k) "
        "| draft cost per step, ms (SD step / baseline step) by k |",
        "|---|---|---|",
    ]
    for m in sorted(t.fits, key=lambda m: (m.drafter, m.draft, m.prompt_class)):
        cost = ", ".join(
            f"k={k}: {m.draft_cost_ms[k]:.1f} ({m.relative_step[k]:.2f}x)"
            for k in sorted(m.draft_cost_ms)
        )
        rows.append(
            f"| {m.draft} ({m.drafter}) / {m.prompt_class} | "
            f"{_positions(m.per_position_rate)} (k={m.acceptance_from_k}) | {cost or '-'} |"
        )
    choices = []
    for d in t.drafter_choices:
        versus = ""
        if d.runner_up_drafter is not None:
            predicted = (
                f"predicted {x(d.predicted / d.runner_up_predicted)}, "
                if d.runner_up_predicted
                else ""
            )
            margin = (
                f"measured head to head {x(d.margin.estimate)} {ci(d.margin)} (n={d.margin.n})"
                if d.margin
                else "not measured head to head"
            )
            versus = (
                f" over {d.runner_up_draft} ({d.runner_up_drafter}) k={d.runner_up_k} "
                f"({predicted}{margin})"
            )
        choices.append(
            f"{d.scope}: **{d.draft} ({d.drafter}) k={d.k}**, predicted {x(d.predicted)}{versus}"
        )
    return [*rows, "", f"Drafter per class: {'; '.join(choices)}." if choices else ""]


def stats_speed(records: Records) -> str:
    r, s = need(records, "stats-speed", StatsSpeedFigures)

    def cell(values: list[float]) -> str:
        middle = sorted(values)[len(values) // 2]
        each = ", ".join(f"{v:.2f}" for v in values)
        return f"**{middle:.1f} s** ({each})"

    return "\n".join(
        [
            f"`{r.command}` ({s.requests_per_arm:,} requests per arm, {s.resamples} resamples; "
            f"{r.day}, {r.machine.text()}):",
            "",
            f"| step | median of {len(s.summarize_s)} (each repetition) |",
            "|---|---|",
            "| paired bootstrap of every figure (`loadtest.stats.paired_statistics`) | "
            f"{cell(s.paired_statistics_s)} |",
            f"| the whole `summarize(run_dir)` | {cell(s.summarize_s)} |",
        ]
    )


def miniature(records: Records) -> str:
    r, m = need(records, "miniature", MiniatureFigures)
    verify = f"target_verify_{m.k + 1}"
    med, p90 = m.median_ms, m.p90_ms
    step = med["target_step_1"]
    load = r.machine.load_average_start
    when = f"{r.date[:16].replace('T', ' ')}, {r.machine.cpu}" + (
        f", load average {load:.1f}" if load is not None else ""
    )

    def mib(name: str) -> str:
        return f"{m.weight_mib[name]:.3g} MiB"

    return "\n".join(
        [
            f"| models of the defaults ({when}) | median | p90 |",
            "| --- | --- | --- |",
            f"| target step, 1 token ({mib('target')} of weights) | {step:.1f} ms "
            f"| {p90['target_step_1']:.1f} ms |",
            f"| target verify step, k+1 = {m.k + 1} tokens | {med[verify]:.1f} ms "
            f"(**{x(med[verify] / step)}** one step: {_verify_cost(med[verify] / step, m.k)}) "
            f"| {p90[verify]:.1f} ms |",
            f"| draft `{m.draft}` step, 1 token ({mib('draft')}) | {med['draft_step_1']:.2f} ms "
            f"(**{med['draft_step_1'] / step:.3f}** of a target step) "
            f"| {p90['draft_step_1']:.2f} ms |",
            f"| the trained target unpadded, 1 token ({mib('trained_target')}) "
            f"| {med['trained_target_step_1']:.2f} ms ({_padding(step, med)}) "
            f"| {p90['trained_target_step_1']:.2f} ms |",
            "",
            f"Implied weight read rate **{m.implied_read_gb_per_s:.1f} GB/s**; the draft's step "
            f"is **{med['draft_step_1'] / step:.1%}** of the target's.",
        ]
    )


def _verify_cost(ratio: float, k: int) -> str:
    """What a verify step of k + 1 tokens costs against one step, in words that follow the
    ratio: nearer one step than k + 1 steps on the log scale (the weights are read once for
    all k + 1 positions), or nearer k + 1 (each position pays its own compute)."""
    if ratio * ratio < k + 1:
        return f"nearer one step than {k + 1}, the weights read once for all {k + 1} tokens"
    return f"nearer {k + 1} steps than one: each token pays its own compute"


def _padding(step: float, medians: dict[str, float]) -> str:
    """What padding the trained target did to a step, in words that follow the numbers."""
    factor = step / medians["trained_target_step_1"]
    if factor >= 1:
        return f"the padding makes a step {factor:.1f}x dearer"
    return f"the padded step is {1 / factor:.1f}x cheaper than the unpadded one"


def arms_spread(records: Records) -> str:
    """Identical cached local runs per arms mode, their spread and the mode chosen."""
    r, f = need(records, "arms-spread", ArmsSpreadFigures)
    chosen = f.chosen("alternating", "sequential", CLASSES)
    names = {"structured": "structured", "open_ended": "open-ended"}

    def label(mode: str) -> str:
        return f"{mode} (blocks of {f.block_requests})" if mode == "alternating" else mode

    rows = [
        "| arms mode | class | E2E speedup of each run [95% CI] | spread (max - min) |",
        "| --- | --- | --- | --- |",
    ]
    for mode in f.modes():
        for c in CLASSES:
            runs = [run for run in f.runs if run.mode == mode]
            each = ", ".join(
                f"{x(run.e2e_speedup[c].estimate)} {ci(run.e2e_speedup[c])}" for run in runs
            )
            rows.append(f"| {label(mode)} | {names[c]} | {each} | **{f.spread(mode, c):.2f}** |")
    overhead = {
        mode: [r.locust_overhead_s for r in f.runs if r.mode == mode and r.locust_overhead_s]
        for mode in f.modes()
    }
    load = {
        mode: [r.load_test_s for r in f.runs if r.mode == mode and r.load_test_s]
        for mode in f.modes()
    }
    failed = [run for run in f.runs if not run.ok]
    lines = [
        f"{len(f.runs)} cached local runs, interleaved by mode ({r.day}, {r.machine.text()}):",
        "",
        "```bash",
        r.command,
        "```",
        "",
        *rows,
        "",
    ]
    if all(overhead.values()) and all(load.values()):
        lines.append(
            "Starting and stopping the Locust processes (once per arm, or once per block) took "
            + "; ".join(
                f"{span(overhead[mode], 0)} s of a {span(load[mode], 0)} s load test {mode}"
                for mode in f.modes()
            )
            + "."
        )
    if failed:
        lines.append(f"{len(failed)} of the runs failed their own checks (see the record).")
    if chosen == "alternating":
        verdict = (
            "alternating's spread is smaller than sequential's for both classes: on that "
            "tree, this record chose **alternating**."
        )
    else:
        verdict = (
            "alternating's spread is not smaller than sequential's for both classes ("
            + ", ".join(
                f"{names[c]} {f.spread('alternating', c):.2f} vs {f.spread('sequential', c):.2f}"
                for c in CLASSES
            )
            + "): on that tree, this record chose **sequential**."
        )
    lines.append(f"With {len(f.runs) // max(len(f.modes()), 1)} runs per mode, {verdict}")
    return "\n".join(lines)


def loadtest_workers(records: Records) -> str:
    r, b = need(records, "bench-workers", BenchFigures)
    at256 = [b.point(256, f"locust_p{n}") for n in (1, 2, 4)]
    ttft = [p.ttft_ms[1] for p in at256]
    itl = [p.itl_token_ms[1] for p in at256]
    per_worker_128 = b.point(256, "locust_p2")
    worst = max(per_worker_128.ttft_p99_by_repetition + per_worker_128.itl_token_p99_by_repetition)
    return (
        f"{r.day}, {r.machine.cores} cores shared with the server, median of {b.repetitions} "
        f"repetitions: TTFT error p99 {span(ttft)} ms and per-token ITL error p99 {span(itl)} "
        f"ms at 256 streams, with one process, two "
        f"workers of 128 streams or four of 64; every repetition with 128 streams per worker "
        f"stayed at or under {worst:.2f} ms"
    )


# Instruments side by side in docs/bench.md: ours, vllm bench serve, AIPerf (the peers).
PEERS = ("locust_p1", "vllm", "aiperf")


def _signed(value: float) -> str:
    """An error in ms at 0.01 ms, without the "-0.00" of a tiny negative one."""
    return f"{value:.2f}" if round(value, 2) != 0 else "0.00"


def _itl_kind(point: BenchPoint) -> str:
    """What the instrument calls ITL, from what the bench read in its output."""
    shown = point.reported
    if shown is None:
        return "its kind of ITL not read (results from before the bench read it)"
    if shown.chunk_tokens:
        return "per token: each chunk gap divided by the tokens the chunk carried"
    if shown.itl_values == 1:
        return "one ITL per request (its mean), not a per-token distribution"
    if shown.itl_values == max(shown.chunk_times - 1, 0):
        return "one ITL per chunk gap, each chunk counted as one token"
    return f"{shown.itl_values:.0f} ITL values per request"


def _reports(point: BenchPoint) -> str:
    shown = point.reported
    if shown is None:
        return "not read (results from before the bench read it)"
    counted = "counted" if shown.chunk_tokens else "not counted"
    return (
        f"{shown.chunk_times:.0f} chunk times, {shown.itl_values:.0f} ITL "
        f"value{'' if shown.itl_values == 1 else 's'}: {_itl_kind(point)}; tokens per chunk "
        f"{counted}"
    )


def bench_instruments(records: Records) -> str:
    r, b = need(records, "bench", BenchFigures)
    levels = sorted({p.level for p in b.points})
    rows = [
        "| streams | instrument | TTFT err p50 / p99 (ms) | per-token ITL err p50 / p99 (ms) "
        "| reports per request (read from its output) |",
        "|---:|---|---:|---:|---|",
    ]
    for level in levels:
        for instrument in PEERS:
            try:
                p = b.point(level, instrument)
            except KeyError:
                continue
            rows.append(
                f"| {level} | {p.label} | {_signed(p.ttft_ms[0])} / {_signed(p.ttft_ms[1])} "
                f"| {_signed(p.itl_token_ms[0])} / {_signed(p.itl_token_ms[1])} "
                f"| {_reports(p)} |"
            )
    return "\n".join(
        [
            f"`{r.command}` on {r.day}, {r.machine.text()}, {r.provenance.text()}: the same "
            f"workload, levels and request counts for each instrument, each against a fresh "
            f"truth server; median of {b.repetitions} interleaved repetitions.",
            "",
            *rows,
        ]
    )


def bench_run(records: Records) -> str:
    r, b = need(records, "bench", BenchFigures)
    took = f", {dur(b.duration_s)}" if b.duration_s is not None else ""
    return (
        f"The table below is from the last full run (`{r.command}`, "
        f"{r.date[:16].replace('T', ' ')} UTC{took}, {r.provenance.text()}, "
        f"{r.machine.text()}): each figure is the **median over {b.repetitions} interleaved "
        "repetitions** (`results.json` has every repetition)"
    )


def bench_duration(records: Records) -> str:
    r, b = need(records, "bench", BenchFigures)
    if b.duration_s is None:
        raise RegionError("bench/results.json has no duration_s: run make bench")
    return f"{dur(b.duration_s)} on {r.machine.cores} cores, {r.day}"


# Issue 6's bar for the load generator at 64 streams from one process (ms, |error|).
BAR_P50_MS, BAR_P99_MS = 1.0, 2.0


def bench_bar(records: Records) -> str:
    _, b = need(records, "bench", BenchFigures)
    ours, vllm = b.point(64, "locust_p1"), b.point(64, "vllm")

    def reps(values: list[float]) -> str:
        return f" (reps: {' / '.join(f'{v:.3f}' for v in values)})" if values else ""

    def met(our: float, their: float, bar: float) -> str:
        verdict = "yes" if abs(our) <= bar else "no"
        return verdict if abs(their) <= bar else f"{verdict} (vllm: no)"

    def row(
        name: str,
        index: int,
        bar: float,
        our: tuple[float, float],
        their: tuple[float, float],
        our_reps: list[float],
        their_reps: list[float],
    ) -> str:
        return (
            f"| {name} | {our[index]:.2f} ms{reps(our_reps)} | {their[index]:.2f} ms"
            f"{reps(their_reps)} | ≤ {bar:g} ms | {met(our[index], their[index], bar)} |"
        )

    def count(point: BenchPoint) -> str:
        if point.token_count_mismatches is None:
            return "not reported"
        return (
            "exact" if point.token_count_mismatches == 0 else f"{point.token_count_mismatches} off"
        )

    return "\n".join(
        [
            "| at 64 streams, 1 process | ours | vllm bench serve | bar | met? |",
            "|---|---:|---:|---:|---|",
            row("TTFT error p50", 0, BAR_P50_MS, ours.ttft_ms, vllm.ttft_ms, [], []),
            row(
                "TTFT error p99",
                1,
                BAR_P99_MS,
                ours.ttft_ms,
                vllm.ttft_ms,
                ours.ttft_p99_by_repetition,
                vllm.ttft_p99_by_repetition,
            ),
            row(
                "per-token ITL error p50",
                0,
                BAR_P50_MS,
                ours.itl_token_ms,
                vllm.itl_token_ms,
                [],
                [],
            ),
            row(
                "per-token ITL error p99",
                1,
                BAR_P99_MS,
                ours.itl_token_ms,
                vllm.itl_token_ms,
                ours.itl_token_p99_by_repetition,
                vllm.itl_token_p99_by_repetition,
            ),
            f"| token count | {count(ours)} | {count(vllm)} | | "
            f"{'yes' if ours.token_count_mismatches == 0 else 'no'} |",
        ]
    )


def bench_workers(records: Records) -> str:
    r, b = need(records, "bench-workers", BenchFigures)

    def pair(values: tuple[float, float] | None) -> str:
        return "-" if values is None else f"{values[0]:.2f} / {values[1]:.2f}"

    def cores(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}"

    machine = r.machine
    load = (
        f"load average {machine.load_average_start:.2f} at the start"
        if machine.load_average_start is not None
        else "load average not recorded"
    )
    if machine.load_average_end is not None:
        load += f", {machine.load_average_end:.2f} at the end"
    rows = [
        f"Measured {r.date[:16].replace('T', ' ')} UTC on {machine.cores} CPUs ({load}; the "
        f"truth server, the master and the workers share them). Median of {b.repetitions} "
        f"interleaved repetitions; every repetition is in `bench/results_workers.json`:",
        "",
        "| streams | instrument | TTFT err p50 / p99 (ms) | per-token ITL err p50 / p99 (ms) "
        "| chunk-gap err p50 / p99 (ms) | E2E err p50 / p99 (ms) | tokens/s "
        "| client CPU (cores) | server CPU (cores) |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for p in b.points:
        tokens = "-" if p.tokens_per_s is None else f"{p.tokens_per_s:.0f}"
        rows.append(
            f"| {p.level} | {p.label} | {pair(p.ttft_ms)} | {pair(p.itl_token_ms)} "
            f"| {pair(p.chunk_gap_ms)} | {pair(p.e2e_ms)} | {tokens} "
            f"| {cores(p.client_cpu_cores)} | {cores(p.server_cpu_cores)} |"
        )
    two = b.point(256, "locust_p2")
    rows += [
        "",
        "Per repetition at 256 streams with two workers: TTFT p99 "
        + " / ".join(f"{v:.2f}" for v in two.ttft_p99_by_repetition)
        + " ms, per-token ITL p99 "
        + " / ".join(f"{v:.2f}" for v in two.itl_token_p99_by_repetition)
        + " ms.",
    ]
    return "\n".join(rows)


def guardrails_drill(records: Records) -> str:
    r, d = need(records, "guardrails-drill", GuardrailsDrillFigures)
    when = f"{r.day}, {r.machine.text()}"

    def fire(name: str) -> str:
        seconds = d.time_to_fire_s.get(name)
        return "did not fire" if seconds is None else f"fired after {seconds:.1f} s"

    fired = sum(len(run) for run in d.healthy_alerts)
    sweep = "; ".join(
        f"{p.streams} in flight: {p.sd_over_baseline_time_per_token:.2f}"
        + (" (fired)" if p.slower_than_baseline_fired else "")
        for p in d.sweep
        if p.sd_over_baseline_time_per_token is not None
    )
    series = ", ".join(f"{job} {n}" for job, n in sorted(d.series_scraped.items()))
    healthy = "-" if d.acceptance_healthy is None else f"{d.acceptance_healthy:.2f}"
    drifted = "-" if d.acceptance_drifted is None else f"{d.acceptance_drifted:.2f}"
    return (
        f"Measured {when} (window {d.window_s} s, evaluation every "
        f"{d.evaluation_interval_s} s, structured floor {d.floor}): **{fired} alerts** on "
        f"{len(d.healthy_alerts)} healthy runs of {span([float(n) for n in d.healthy_requests], 0)}"
        f" requests each ({d.failed_requests} failed), speculative acceptance {healthy}; drifted"
        f" mix: acceptance {drifted}, SpecDecodeAcceptanceBelowFloor "
        f"**{fire('acceptance_below_floor')}**; speculative server killed: "
        f"SpecDecodeArmMetricsMissing **{fire('arm_metrics_missing')}**. Speculative / baseline"
        f" time per output token by requests in flight: {sweep or 'not measured'}. Series "
        f"held at the end, by job: {series}." + _drill_analysis(d)
    )


def _drill_analysis(d: GuardrailsDrillFigures) -> str:
    """What the cluster's rollback analysis decided in the drill (records since it has)."""
    if d.time_to_abort_s is None:
        return ""

    def aborted(name: str) -> str:
        seconds = (d.time_to_abort_s or {}).get(name)
        return "did not abort" if seconds is None else f"aborted after {seconds:.1f} s"

    held = sum("no abort" in text for text in d.healthy_analysis or [])
    late = d.late_start_analysis or "not measured"
    return (
        f" The rendered rollback analysis, run against the same Prometheus with Argo's "
        f"semantics: **{held} of {len(d.healthy_analysis or [])} healthy runs held**; drifted "
        f"mix **{aborted('acceptance_below_floor')}**; killed server "
        f"**{aborted('arm_metrics_missing')}**; the speculative server restarted late under "
        f"traffic: {late}."
    )


def guardrails_lifecycle(records: Records) -> str:
    r, d = need(records, "guardrails-lifecycle", GuardrailsLifecycleFigures)

    def outcome(t: LifecycleTimeline) -> str:
        if not t.aborted:
            return f"no abort ({t.phase})"
        if t.windows_to_abort is not None:
            after = f", {t.windows_to_abort:.1f} windows after the fault"
        else:
            after = "" if t.abort_at_s is None else f" at {t.abort_at_s:.0f} s"
        return f"**{t.phase}**{after}, by {t.decided_by} ({t.message})"

    rows = [
        f"Evaluated {r.day} on the {d.profile} rendering (scrape every {d.scrape_interval_s} s, "
        f"rules every {d.evaluation_interval_s} s, window {d.window_s} s):",
        "",
        "| timeline | kind | what happens | analysis |",
        "| --- | --- | --- | --- |",
        *(
            f"| {t.timeline} | {t.kind} | {t.description} | {outcome(t)} |"
            for t in [*d.timelines, d.as_rendered_before]
        ),
        "",
    ]
    healthy = [t for t in d.timelines if t.kind == "healthy"]
    faults = [t for t in d.timelines if t.kind == "fault"]
    aborted_healthy = sum(t.aborted for t in healthy)
    late = [t for t in faults if not t.aborted or (t.windows_to_abort or 0) > 2]
    rows.append(
        f"{aborted_healthy} of {len(healthy)} healthy timelines aborted; "
        + (
            f"every one of the {len(faults)} faults aborted within two windows"
            if not late
            else f"{len(late)} of {len(faults)} faults did not abort within two windows "
            f"({', '.join(t.timeline for t in late)})"
        )
        + "; the first deploy analysed as rendered before "
        + ("aborted." if d.as_rendered_before.aborted else "did not abort.")
    )
    return "\n".join(rows)


def replay_accuracy(records: Records) -> str:
    r, d = need(records, "replay-accuracy", ReplayAccuracyFigures)
    when = f"{r.day}, {r.machine.text()}"
    rows = [
        f"Measured {when}; the traces' requests each stream for {d.service_s:g} s, "
        f"{d.burst_share:.0%} of them in bursts every {d.burst_every_s:g} s, time scale "
        f"{d.time_scale:g}.",
        "",
        "| streams | Locust processes | requests | p50 ms | p99 ms | max ms | min ms "
        "| in flight (mean / peak) | goal (p99) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for level in d.levels:
        goal = P99_GOAL_MS.get(level.streams)
        verdict = (
            "-"
            if goal is None
            else (f"<= {goal:g} ms: {'met' if level.p99_ms <= goal else 'missed'}")
        )
        processes = "1" if level.workers == 1 else f"{level.workers} workers"
        missing = f" ({level.unmatched} unmatched)" if level.unmatched else ""
        rows.append(
            f"| {level.streams} | {processes} | {level.n}{missing} | {level.p50_ms:.2f} "
            f"| {level.p99_ms:.2f} | {level.max_ms:.2f} | {level.min_ms:.2f} "
            f"| {level.mean_in_flight:.0f} / {level.peak_in_flight} | {verdict} |"
        )
    written = (
        "written together by the first of their senders"
        if d.burst_writes
        else "written one after another"
    )
    for level in d.levels:
        if level.absolute_p50_ms is not None and level.absolute_p99_ms is not None:
            rows += [
                "",
                f"At {level.streams} streams (one process), against the window start itself: "
                f"p50 {level.absolute_p50_ms:.2f} ms, p99 {level.absolute_p99_ms:.2f} ms "
                "(the connect and loopback path included).",
            ]
        if level.alone_p99_ms is not None and level.burst_p99_ms is not None:
            rows += [
                "",
                f"At {level.streams} streams, the requests alone at their offset: p99 "
                f"{level.alone_p99_ms:.2f} ms; those in a burst (up to {level.largest_burst} at "
                f"one offset, {written}): p99 {level.burst_p99_ms:.2f} ms.",
            ]
        if level.worker_p50_ms:
            starts = ", ".join(f"{v:.2f}" for _, v in sorted(level.worker_p50_ms.items()))
            rows += [
                "",
                f"At {level.streams} streams, the p50 error of each worker's own requests: "
                f"{starts} ms (each worker opens its window when the master's message "
                "reaches it).",
            ]
    return "\n".join(rows)


def _send_errors(errors: SendErrors | None) -> str:
    if errors is None:
        return "-"
    return f"{errors.p50_ms:.2f} / {errors.p99_ms:.2f} / {errors.max_ms:.2f}"


def _peer_label(run: ReplayPeerRun) -> str:
    if run.workers is None:
        return run.label
    return f"{run.label}, {run.workers} {'process' if run.workers == 1 else 'workers'}"


def replay_peers_verdicts(d: ReplayPeersFigures) -> list[str]:
    """The goals judged on the record's numbers, one sentence each: the load test's lone p99
    against LONE_P99_GOAL_MS, its burst members' p99 against the best peer's (rounded as
    shown, so a verdict never contradicts the table)."""
    out = []
    for streams in d.levels():
        ours = d.run(streams, "loadtest")
        if ours is None or ours.error is not None:
            out.append(f"At {streams} streams the load test did not replay the trace: not judged.")
            continue
        goal = LONE_P99_GOAL_MS.get(streams)
        if ours.lone is not None and goal is not None:
            met = round(ours.lone.p99_ms, 2) <= goal
            out.append(
                f"At {streams} streams the load test's lone requests reached the server "
                f"{'within' if met else 'outside'} the goal: p99 {ms(ours.lone.p99_ms)} "
                f"against {goal:g} ms ({'met' if met else 'missed'})."
            )
        if ours.burst is None:
            continue
        peers = {
            run.label: run.burst
            for run in d.runs
            if run.streams == streams
            and not run.tool.startswith("loadtest")
            and run.burst is not None
        }
        if not peers:
            out.append(
                f"At {streams} streams no peer replayed the trace's bursts: the burst goal "
                "is not judged."
            )
            continue
        best = min(peers, key=lambda label: round(peers[label].p99_ms, 2))
        met = round(ours.burst.p99_ms, 2) <= round(peers[best].p99_ms, 2)
        out.append(
            f"At {streams} streams the load test's burst members were "
            f"{'no later than' if met else 'later than'} the best peer's ({best}): "
            f"p99 {ms(ours.burst.p99_ms)} against {ms(peers[best].p99_ms)} "
            f"({'met' if met else 'missed'})."
        )
        turns = d.run(streams, "loadtest-turns")
        if turns is not None and turns.burst is not None:
            ours_ms, turns_ms = round(ours.burst.p99_ms, 2), round(turns.burst.p99_ms, 2)
            how = (
                "earlier than"
                if ours_ms < turns_ms
                else "as late as"
                if ours_ms == turns_ms
                else "later than"
            )
            out.append(
                f"Written together, the burst members reached the server {how} with each "
                f"written in its own turn: p99 {ms(ours.burst.p99_ms)} against "
                f"{ms(turns.burst.p99_ms)}."
            )
    return out


def _by_repetition(values: list[float]) -> str:
    return ", ".join(f"{v:.2f}" for v in values) or "-"


def replay_peers(records: Records) -> str:
    r, d = need(records, "replay-peers", ReplayPeersFigures)
    versions = ", ".join(f"{name} {version}" for name, version in sorted(d.versions.items()))
    repeated = (
        f"each figure the median of {d.repetitions} interleaved repetitions"
        if d.repetitions > 1
        else "one repetition"
    )
    rows = [
        f"Measured {r.day}, {r.machine.text()} ({versions}): one trace per level, its "
        f"requests each streaming for {d.service_s:g} s, {d.burst_share:.0%} of them in "
        f"bursts every {d.burst_every_s:g} s, time scale {d.time_scale:g}, replayed by each "
        f"tool in turn against a fresh truth server; {repeated}. Send error in ms, "
        "p50 / p99 / max, relative to the tool's median request; the p99 of each repetition "
        "and the 1-minute load average at its start beside them.",
        "",
        "| streams | tool | requests matched | lone requests | burst members | largest burst "
        "| p99 by repetition: lone; burst | load average |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for streams in d.levels():
        for run in (found for found in d.runs if found.streams == streams):
            loads = _by_repetition(run.load_average_1m)
            if run.error is not None:
                rows.append(
                    f"| {streams} | {_peer_label(run)} | failed: {run.error} | - | - | - | - "
                    f"| {loads} |"
                )
                continue
            missing = f" ({run.unmatched} unmatched)" if run.unmatched else ""
            failed = (
                f"; {len(run.failures)} repetition{'s' if len(run.failures) > 1 else ''} "
                f"failed: {run.failures[-1]}"
                if run.failures
                else ""
            )
            rows.append(
                f"| {streams} | {_peer_label(run)} | {run.matched} of {run.requests}{missing}"
                f"{failed} | {_send_errors(run.lone)} | {_send_errors(run.burst)} "
                f"| {run.largest_burst} | {_by_repetition(run.lone_p99_ms_by_repetition)}; "
                f"{_by_repetition(run.burst_p99_ms_by_repetition)} | {loads} |"
            )
    for verdict in replay_peers_verdicts(d):
        rows += ["", verdict]
    return "\n".join(rows)


def adaptive_k(records: Records) -> str:
    """The schedule against the best fixed k and the baseline by load (bench/figures/
    adaptive_k.py: its goals and break-even words are computed there from the numbers)."""
    record, figures = need(records, "adaptive-k", AdaptiveKFigures)
    return region_text(record, figures)


def adaptive_k_plot(records: Records) -> str:
    return plot_svg(need(records, "adaptive-k", AdaptiveKFigures)[1])


# Plot files rendered from records like the regions (SVG: text, checked byte for byte), by
# path from the repository root.
PLOTS: dict[str, Callable[[Records], str]] = {
    "docs/records/adaptive-k.svg": adaptive_k_plot,
}


REGIONS: dict[str, Callable[[Records], str]] = {
    "readme-times": readme_times,
    "readme-light-tiers": readme_light_tiers,
    "readme-local-expected": readme_local_expected,
    "local-hosts": local_hosts,
    "binding-spread": binding_spread,
    "readme-bench": readme_bench,
    "readme-tune": readme_tune,
    "local-run-expected": local_run_expected,
    "tune-sweep": tune_sweep,
    "local-eagle3": local_eagle3,
    "local-tiered": local_tiered,
    "readme-tiered": readme_tiered,
    "readme-eagle3": readme_eagle3,
    "stats-speed": stats_speed,
    "miniature": miniature,
    "guardrails-drill": guardrails_drill,
    "guardrails-lifecycle": guardrails_lifecycle,
    "replay-accuracy": replay_accuracy,
    "replay-peers": replay_peers,
    "loadtest-workers": loadtest_workers,
    "arms-spread": arms_spread,
    "adaptive-k": adaptive_k,
    "bench-duration": bench_duration,
    "bench-bar": bench_bar,
    "bench-workers": bench_workers,
    "bench-instruments": bench_instruments,
    "bench-run": bench_run,
}


@dataclass(frozen=True)
class Region:
    path: Path
    name: str
    body: str


def documents(root: Path = ROOT) -> list[Path]:
    """The documents whose measured figures are rendered: README.md and docs/*.md (but the
    generated configuration reference, docs/config.md, which holds no measurement)."""
    docs = sorted(p for p in (root / "docs").glob("*.md") if p.name != "config.md")
    return [root / "README.md", *docs]


def rendered_documents(root: Path = ROOT) -> list[Path]:
    """The documents with regions: those above, and bench/README.md (whose prose the scan
    leaves alone: its results table is the bench's own, written by python -m bench)."""
    return [*documents(root), root / "bench" / "README.md"]


def regions(path: Path, text: str) -> list[Region]:
    return [Region(path, m["name"], m["body"]) for m in REGION.finditer(text)]


def _sources(path: Path, names: list[str], records: Records) -> str:
    links = []
    for name in names:
        bench = BENCH_RESULT_FILES.get(name)
        target = ROOT / bench[0] if bench else RECORDS_DIR / f"{name}.json"
        links.append(f"[{name}]({os.path.relpath(target, path.parent)}), {tree(records[name])}")
    return "; ".join(links)


def tree(record: FigureRecord) -> str:
    """The tree a record was measured on, as every region says it: a record of another
    tree than today's is read as such."""
    commit = record.provenance.commit
    if record.provenance.kind == "transcribed-from-commit":
        return f"transcribed from commit {commit}"
    if not commit:
        return "measured on a tree whose commit was not recorded"
    if commit.endswith("+"):
        return f"measured at commit {commit[:-1]} with uncommitted changes"
    return f"measured at commit {commit}"


def used_records(name: str, records: Records) -> list[str]:
    """Which records a region reads (by rendering it against a recording mapping)."""
    seen: list[str] = []

    class Recording(dict[str, FigureRecord]):
        def get(self, key: str, default: object = None) -> FigureRecord | None:  # type: ignore[override]
            if key not in seen:
                seen.append(key)
            return super().get(key)

        def __getitem__(self, key: str) -> FigureRecord:
            if key not in seen:
                seen.append(key)
            return super().__getitem__(key)

    REGIONS[name](Recording(records))
    return seen


def render_region(path: Path, name: str, inline: bool, records: Records) -> str:
    if name not in REGIONS:
        raise RegionError(
            f"{path.name}: unknown figures region {name!r}; known: {sorted(REGIONS)} "
            "(add a renderer to bench/figures/regions.py)"
        )
    body = REGIONS[name](records)
    sources = _sources(path, used_records(name, records), records)
    if inline:
        return f"{body} (records: {sources})"
    # a blank line after the opening marker: a table must not touch the comment's HTML block
    return f"\n\n{body}\n\nRendered from records {sources} by `python -m bench.figures render`.\n"


def render_document(path: Path, text: str, records: Records) -> str:
    def replace(match: re.Match[str]) -> str:
        inline = not match["body"].startswith("\n")
        body = render_region(path, match["name"], inline, records)
        return f"<!-- figures:{match['name']} -->{body}<!-- /figures:{match['name']} -->"

    return REGION.sub(replace, text)
