"""The acceptance floors the pilot supports: computed once (loadtest.verdict.pilot_floors),
carried by summary.json and printed next to the verdict's routing line as ``-c`` overrides
that build_config reads back into config.routing.acceptance_floors."""

from __future__ import annotations

import json
import math
import shlex

import jsonschema
import numpy as np
import pytest

from experiment import build_config
from experiment.loading import context_from_pairs
from loadtest.analysis import analysis_info
from loadtest.records import read_records, write_records
from loadtest.render.console import render_summary_table
from loadtest.render.decision import routing_text
from loadtest.report import write_report
from loadtest.results import (
    Acceptance,
    AcceptanceSource,
    ClassVerdict,
    Decision,
    Interval,
    RunSummary,
    summary_json_schema,
)
from loadtest.summary import summarize
from loadtest.verdict import FLOOR_DECIMALS, floor_down, pilot_floors

FACTOR = 0.9
MEASURED = Acceptance(
    available=True,
    source=AcceptanceSource.MEASURED,
    acceptance_rate=0.6,
    drafts=100.0,
    draft_tokens=700.0,
    accepted_tokens=420.0,
)
ESTIMATED = Acceptance(
    available=False, source=AcceptanceSource.ESTIMATED, reason="no vllm:spec_decode_* counters"
)
NOT_AVAILABLE = Acceptance(
    available=False,
    source=AcceptanceSource.NOT_AVAILABLE,
    reason="/metrics could not be scraped before and after the window",
)


def _acceptance(estimate: float, low: float | None, high: float | None, n: int = 16) -> Interval:
    return Interval(estimate=estimate, low=low, high=high, n=n, confidence=0.95, null_value=None)


def _verdict(
    name: str, decision: Decision, acceptance: Interval | None = None, pairs: int = 16
) -> ClassVerdict:
    cost = Interval(estimate=0.8, low=0.7, high=0.9, n=pairs, confidence=0.95)
    return ClassVerdict(
        prompt_class=name,
        decision=decision,
        reason="r",
        pairs=pairs,
        cost_ratio=cost,
        acceptance_rate_estimate=acceptance,
    )


ROWS = [
    _verdict("open_ended", Decision.DONT, _acceptance(0.14, 0.10, 0.18)),
    _verdict("structured", Decision.USE_SD, _acceptance(0.613, 0.587, 0.641)),
    _verdict("all", Decision.USE_SD, _acceptance(0.4, 0.35, 0.45)),
]


def _summary(fake_run_dir, rows: list[ClassVerdict], acceptance: Acceptance) -> RunSummary:
    """The fake run's summary with a synthetic verdict and the floors it supports."""
    summary = summarize(fake_run_dir)
    summary.verdict = rows
    summary.arms["speculative"].acceptance = acceptance
    summary.floors = pilot_floors(rows, acceptance, FACTOR)
    return summary


def _applied(text: str | None):
    """The printed -c line, pasted after a command: the config it builds."""
    assert text is not None
    line = text.split("`")[1]
    pairs = [word for word in shlex.split(line) if word != "-c"]
    return line, build_config(context_from_pairs(pairs))


def test_a_routed_class_gets_factor_times_its_lower_bound_rounded_down() -> None:
    floors = pilot_floors(ROWS, MEASURED, FACTOR)
    assert floors is not None
    assert floors.factor == FACTOR and floors.source is AcceptanceSource.MEASURED
    assert floors.measured_acceptance_rate == 0.6
    # Only the classes routed to SD, never "all" (it is not a class the gateway routes).
    assert [entry.prompt_class for entry in floors.by_class] == ["structured"]
    (entry,) = floors.by_class
    assert entry.acceptance == ROWS[1].acceptance_rate_estimate
    assert entry.floor == 0.52  # 0.9 x 0.587 = 0.5283, down to 2 decimals
    assert entry.reason is None
    assert floors.floors() == {"structured": 0.52}


@pytest.mark.parametrize(
    ("acceptance", "says"),
    [
        (ESTIMATED, "acceptance estimated, not measured"),
        (NOT_AVAILABLE, "acceptance not available (/metrics could not be scraped"),
    ],
)
def test_no_floor_without_a_measured_acceptance_and_the_reason_says_which(
    acceptance: Acceptance, says: str
) -> None:
    floors = pilot_floors(ROWS, acceptance, FACTOR)
    assert floors is not None and floors.floors() == {}
    (entry,) = floors.by_class
    assert entry.floor is None and entry.reason is not None and entry.reason.startswith(says)
    assert floors.measured_acceptance_rate is None


def test_no_floor_without_an_interval_or_when_it_rounds_to_zero() -> None:
    rows = [
        _verdict("structured", Decision.USE_SD, _acceptance(0.5, None, None), pairs=3),
        _verdict("open_ended", Decision.USE_SD, _acceptance(0.02, 0.005, 0.04)),
        _verdict("code", Decision.USE_SD, None, pairs=0),
    ]
    floors = pilot_floors(rows, MEASURED, FACTOR)
    assert floors is not None and floors.floors() == {}
    reasons = {entry.prompt_class: entry.reason or "" for entry in floors.by_class}
    assert reasons["structured"] == "its acceptance has no interval (3 pairs)"
    assert reasons["code"] == "its acceptance has no interval (0 pairs)"
    assert "rounds down to 0" in reasons["open_ended"]


def test_no_per_class_verdict_no_floors_and_none_routed_no_entries() -> None:
    assert pilot_floors([ROWS[2]], MEASURED, FACTOR) is None
    floors = pilot_floors(ROWS[:1], MEASURED, FACTOR)
    assert floors is not None and floors.by_class == []


def test_rounding_down_never_exceeds_the_product() -> None:
    # Doubles just below a multiple of 0.01, where value * 100 rounds up to the integer:
    # math.floor(value * 100) / 100 returns the multiple, above the value.
    below = [float(np.nextafter(k / 100, 0)) for k in range(1, 100)]
    assert any(math.floor(v * 100) / 100 > v for v in below)  # the trap is real
    rng = np.random.default_rng(0)
    for value in [*below, *rng.uniform(0, 1, 2000).tolist(), 0.5, 1.0]:
        rounded = floor_down(value)
        assert rounded <= value
        assert value - rounded < 10**-FLOOR_DECIMALS
        assert round(rounded, FLOOR_DECIMALS) == rounded


def test_the_printed_line_round_trips_into_the_floors(fake_run_dir) -> None:
    summary = _summary(fake_run_dir, ROWS, MEASURED)
    text = routing_text(summary)
    line, config = _applied(text)
    assert line == (
        "-c experiment.routing.speculative_classes=structured "
        "-c experiment.routing.acceptance_floors.structured=0.52"
    )
    assert config.routing.speculative_classes == ["structured"]
    assert config.routing.acceptance_floors == {"structured": 0.52}
    low = ROWS[1].acceptance_rate_estimate.low  # type: ignore[union-attr]
    assert config.routing.acceptance_floors["structured"] <= FACTOR * low
    assert (
        "structured: floor 0.52 = 0.9 x the lower 95% bound of its acceptance "
        "0.613 [0.587, 0.641] (client estimate from its tokens per chunk, n=16 pairs), "
        "rounded down to 2 decimals"
    ) in (text or "")
    assert "the SD server measured 0.600 over the whole run (server counters)" in (text or "")


def test_a_class_outside_the_default_allow_list_keeps_the_line_valid(fake_run_dir) -> None:
    rows = [_verdict("code", Decision.USE_SD, _acceptance(0.7, 0.66, 0.74)), ROWS[0]]
    text = routing_text(_summary(fake_run_dir, rows, MEASURED))
    line, config = _applied(text)
    assert "-c experiment.routing.allowed_classes=structured,open_ended,code" in line
    assert config.routing.speculative_classes == ["code"]
    assert config.routing.acceptance_floors == {"code": 0.59}  # 0.9 x 0.66 = 0.594


def test_a_class_without_a_floor_is_named_with_why_and_left_out_of_the_line(
    fake_run_dir,
) -> None:
    text = routing_text(_summary(fake_run_dir, ROWS, ESTIMATED))
    line, config = _applied(text)
    assert "acceptance_floors" not in line
    assert config.routing.acceptance_floors == {}
    assert "- structured: no floor: acceptance estimated, not measured" in (text or "")


def test_every_format_carries_the_floors(fake_run_dir) -> None:
    summary = _summary(fake_run_dir, ROWS, MEASURED)
    paths = write_report(summary, fake_run_dir)
    setting = "-c experiment.routing.acceptance_floors.structured=0.52"
    explained = "structured: floor 0.52 = 0.9 x the lower 95% bound"
    markdown = paths["markdown"].read_text()
    assert setting in markdown and f"- {explained}" in markdown
    html = paths["html"].read_text()
    assert setting in html and explained in html
    console = render_summary_table(summary)
    assert setting in console and explained in console
    stored = json.loads(summary.model_dump_json())
    jsonschema.validate(stored, summary_json_schema())
    assert stored["floors"]["by_class"][0]["floor"] == 0.52
    assert RunSummary.model_validate(stored).floors == summary.floors


def _lossless_cheaper_sd(run_dir, figures: bool = False) -> RunSummary:
    """The fake run with an SD arm that is lossless and cheaper (a verdict of "use SD" for
    both classes), the run's factor 0.5; ``figures``: every SD request also carries its own
    speculation figures (vLLM --per-request-spec-decode-metrics), 8 or 10 of 12 accepted."""
    records_file = run_dir / "records_speculative.jsonl"
    records = read_records(records_file)
    for record in records:  # the baseline's words, four per chunk: lossless
        record.chunk_texts = [
            "".join(f" w{i}" for i in range(4 * j, 4 * j + 4))
            for j in range(len(record.chunk_texts))
        ]
        # Started twice as often: the same tokens in half the window cost half as much.
        record.start /= 2
        if record.wall_start is not None:
            record.wall_start /= 2
        if figures:
            record.spec_steps, record.spec_draft_tokens = 4, 12
            record.spec_accepted_tokens = 8 + 2 * (record.index % 2)
            record.spec_histogram = None
    write_records(records_file, records)
    context = {"guardrails.live.pilot_floor_factor": "0.5", "statistics.min_pairs_for_verdict": "4"}
    run_file = run_dir / "run.json"
    run = json.loads(run_file.read_text())
    run["analysis"] = analysis_info(build_config(context)).model_dump(mode="json")
    run_file.write_text(json.dumps(run))
    return summarize(run_dir)


def test_summarize_computes_the_floors_with_the_runs_factor(fake_run_dir) -> None:
    """From the records to the pasted line: a lossless SD arm, cheaper, whose counters moved
    gets a floor per class from the run's own factor (written to run.json when the run
    starts, so a rebuilt report keeps it)."""
    summary = _lossless_cheaper_sd(fake_run_dir)
    assert summary.lossless.exact_matches == summary.lossless.prompts_compared > 0
    assert [v.decision for v in summary.verdict[:-1]] == [Decision.USE_SD] * 2, summary.verdict
    sd = summary.arm("speculative").acceptance
    assert sd.source is AcceptanceSource.MEASURED
    assert summary.floors is not None and summary.floors.factor == 0.5
    assert summary.floors == pilot_floors(summary.verdict, sd, 0.5)
    stored = RunSummary.model_validate_json((fake_run_dir / "summary.json").read_text())
    assert stored.floors == summary.floors
    _, config = _applied(routing_text(summary))
    assert config.routing.speculative_classes == ["open_ended", "structured"]
    for verdict in summary.verdict[:-1]:
        low = verdict.acceptance_rate_estimate.low  # type: ignore[union-attr]
        assert low is not None and low > 0
        floor = config.routing.acceptance_floors[verdict.prompt_class]
        assert 0.5 * low - 0.01 < floor <= 0.5 * low


PER_REQUEST = Acceptance(
    available=True,
    source=AcceptanceSource.PER_REQUEST,
    acceptance_rate=0.6,
    drafts=100.0,
    draft_tokens=700.0,
    accepted_tokens=420.0,
)


def test_the_requests_own_figures_replace_the_estimate_where_given() -> None:
    own = _acceptance(0.8, 0.7, 0.85, n=40)
    floors = pilot_floors(ROWS, PER_REQUEST, FACTOR, {"structured": own})
    assert floors is not None
    (entry,) = floors.by_class
    assert entry.acceptance == own and entry.acceptance_source is AcceptanceSource.PER_REQUEST
    assert entry.floor == 0.63  # 0.9 x 0.7, not 0.9 x the estimate's 0.587
    # A class the figures do not cover keeps the estimate, and says so.
    (kept,) = pilot_floors(ROWS, PER_REQUEST, FACTOR, {}).by_class  # type: ignore[union-attr]
    assert kept.acceptance_source is AcceptanceSource.ESTIMATED and kept.floor == 0.52


def _with_figures(record, steps: int, accepted: int, k: int = 3) -> None:
    record.spec_steps, record.spec_draft_tokens = steps, k * steps
    record.spec_accepted_tokens = accepted


def test_request_acceptance_interval_is_a_ratio_of_sums_over_requests() -> None:
    from loadtest.records import RequestRecord
    from loadtest.stats import request_acceptance_interval

    settings = build_config({}).statistics
    records = []
    for index in range(30):
        record = RequestRecord(
            arm="speculative", index=index, prompt_id="p", prompt_class="structured",
            max_tokens=16, start=0.0, output_tokens=16,
        )  # fmt: skip
        _with_figures(record, 5, 12 if index % 3 else 6)  # 12 or 6 of 15 accepted
        records.append(record)
    found = request_acceptance_interval(records, settings)
    assert found is not None and found.n == 30
    assert found.estimate == pytest.approx((20 * 12 + 10 * 6) / (30 * 15))
    assert found.low is not None and found.high is not None
    assert 6 / 15 < found.low < found.estimate < found.high < 12 / 15
    # Requests without figures, failed or warm-up are left out; none left: no interval.
    for record in records:
        record.spec_draft_tokens = None
    assert request_acceptance_interval(records, settings) is None


def test_the_floor_text_names_the_per_request_source() -> None:
    from loadtest.render.decision import floor_text

    own = _acceptance(0.8, 0.7, 0.85, n=40)
    (entry,) = pilot_floors(ROWS, PER_REQUEST, FACTOR, {"structured": own}).by_class  # type: ignore[union-attr]
    assert "(per-request figures, n=40 requests)" in floor_text(entry, FACTOR)
    (kept,) = pilot_floors(ROWS, MEASURED, FACTOR).by_class  # type: ignore[union-attr]
    assert "(client estimate from its tokens per chunk, n=16 pairs)" in floor_text(kept, FACTOR)


def test_summarize_takes_the_floors_from_the_requests_own_figures(fake_run_dir) -> None:
    summary = _lossless_cheaper_sd(fake_run_dir, figures=True)
    assert summary.arm("speculative").acceptance.source is AcceptanceSource.PER_REQUEST
    assert summary.floors is not None
    for entry in summary.floors.by_class:
        assert entry.acceptance_source is AcceptanceSource.PER_REQUEST, entry
        assert entry.acceptance is not None and entry.acceptance.estimate is not None
        assert 8 / 12 <= entry.acceptance.estimate <= 10 / 12
        assert entry.floor is not None and entry.floor <= 0.5 * (entry.acceptance.low or 0)
    stored = RunSummary.model_validate_json((fake_run_dir / "summary.json").read_text())
    assert stored.floors == summary.floors
