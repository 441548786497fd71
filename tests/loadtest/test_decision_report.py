"""Statistics, cost and verdict in summary.json, the console table, report.md and report.html."""

from __future__ import annotations

import csv
import json

import jsonschema
import pytest

from experiment import build_config
from loadtest.analysis import analysis_info
from loadtest.render.console import render_summary_table
from loadtest.report import write_report
from loadtest.results import Decision, RunSummary, summary_json_schema
from loadtest.summary import summarize


@pytest.fixture
def analysed_run_dir(fake_run_dir):
    """The fake run with the analysis settings the runner writes into run.json."""
    config = build_config({})
    run_file = fake_run_dir / "run.json"
    run = json.loads(run_file.read_text())
    run["analysis"] = analysis_info(config).model_dump(mode="json")
    run_file.write_text(json.dumps(run))
    return fake_run_dir


def test_every_speedup_acceptance_and_cost_carries_its_interval_and_n(analysed_run_dir) -> None:
    summary = summarize(analysed_run_dir)
    stats, cost = summary.statistics, summary.cost
    assert stats is not None and cost is not None
    pairs = stats.overall.pairs
    assert pairs > 0
    for scope in (stats.overall, *stats.by_class.values()):
        for by_stat in scope.speedup.values():
            for interval in by_stat.values():
                assert interval.n <= pairs and interval.confidence == 0.95
        assert scope.acceptance_rate_estimate.n == scope.pairs
    for scope_cost in (cost.overall, *cost.by_class.values()):
        assert set(scope_cost.usd_per_million_output_tokens) == {"baseline", "speculative"}
        assert scope_cost.ratio.n > 0
    # the trn2 price by default (the URLs are not the local servers'), labelled nominal
    assert cost.basis.target == "trn2" and cost.basis.nominal
    assert [v.prompt_class for v in summary.verdict] == [*sorted(stats.by_class), "all"]
    assert all(isinstance(v.decision, Decision) for v in summary.verdict)
    stored = json.loads((analysed_run_dir / "summary.json").read_text())
    jsonschema.validate(stored, summary_json_schema())
    assert RunSummary.model_validate(stored) == summary  # derived fields re-derive alike


def test_summary_is_reproducible_from_the_run_directory(analysed_run_dir) -> None:
    first = summarize(analysed_run_dir).model_dump(mode="json")
    again = summarize(analysed_run_dir).model_dump(mode="json")
    assert first["statistics"] == again["statistics"] and first["verdict"] == again["verdict"]


def test_verdict_opens_the_report_and_cost_is_in_every_format(analysed_run_dir) -> None:
    summary = summarize(analysed_run_dir)
    paths = write_report(summary, analysed_run_dir)
    markdown = paths["markdown"].read_text()
    sections = [line for line in markdown.splitlines() if line.startswith("## ")]
    assert sections[0] == "## Verdict: use speculative decoding?"
    for text in ("cost SD / base [95% CI]", "USD / 1M output tokens", "NOMINAL price", "pairs"):
        assert text in markdown, text
    html = paths["html"].read_text()
    assert html.index("Verdict") < html.index("Both arms")
    assert "cost SD / base [95% CI]" in html
    rows = list(csv.DictReader(paths["csv"].open()))
    e2e = {
        r["stat"]: r["value"]
        for r in rows
        if r["arm"] == "comparison"
        and r["prompt_class"] == "all"
        and r["metric"] == "speedup_e2e_ms_mean"
    }
    assert set(e2e) == {"estimate", "low", "high", "n"}
    assert float(e2e["estimate"]) == pytest.approx(
        summary.statistics.overall.speedup["e2e_ms"]["mean"].estimate
    )
    assert any(r["metric"] == "usd_per_million_output_tokens" for r in rows)
    console = render_summary_table(summary)
    assert "verdict" in console and "SD USD / 1M output tokens" in console
    assert summary.verdict[-1].decision.value in console


def test_an_old_run_directory_says_why_there_is_no_verdict(fake_run_dir) -> None:
    summary = summarize(fake_run_dir)  # run.json without "analysis": an older version's run
    assert summary.statistics is None and summary.cost is None and summary.verdict == []
    markdown = write_report(summary, fake_run_dir)["markdown"].read_text()
    assert "No verdict: this run directory predates the statistics" in markdown
    assert "verdict" not in render_summary_table(summary)


def test_acceptance_without_server_counters_points_at_the_client_estimate(
    analysed_run_dir,
) -> None:
    """The Neuron fork exports no spec-decode counters: the acceptance table must then show
    the client-side estimate with its interval and n, not just "not available"."""
    from loadtest.render.tables import acceptance_rows
    from loadtest.results import Acceptance, AcceptanceSource

    summary = summarize(analysed_run_dir)
    assert summary.statistics is not None
    no_counters = Acceptance(
        available=False,
        source=AcceptanceSource.ESTIMATED,
        reason="no spec_decode counters in /metrics",
    )
    arms = {
        name: arm.model_copy(update={"acceptance": no_counters})
        for name, arm in summary.arms.items()
    }
    summary = summary.model_copy(update={"arms": arms})
    _, rows = acceptance_rows(summary)
    notes = {row[0]: row[4] for row in rows}
    estimate = summary.statistics.overall.acceptance_rate_estimate
    assert estimate.estimate is not None
    sd_note = notes[summary.arms["speculative"].label]
    assert sd_note.startswith("no spec_decode counters in /metrics; client-side estimate ")
    assert f"{estimate.estimate:.3f} [{estimate.low:.3f}, {estimate.high:.3f}]" in sd_note
    assert f"n={estimate.n} pairs" in sd_note
    assert "estimate" not in notes[summary.arms["baseline"].label]
    # Counters present: the estimate is not repeated in the acceptance table.
    _, rows = acceptance_rows(summarize(analysed_run_dir))
    assert all("client-side estimate" not in row[4] for row in rows)


def test_run_json_carries_config_statistics_and_reads_the_flat_settings_of_schema_4(
    analysed_run_dir,
) -> None:
    from loadtest.results import AnalysisInfo

    config = build_config({"statistics.seed": "3", "statistics.min_pairs_for_verdict": "12"})
    info = analysis_info(config)
    assert info.statistics == config.statistics  # the config section itself, not a copy
    flat = info.model_dump(mode="json")
    flat.update(flat.pop("statistics"))  # how schema 4 wrote run.json
    assert set(flat) >= {"confidence", "resamples", "seed", "min_pairs_for_verdict"}
    assert AnalysisInfo.model_validate(flat) == info
    run_file = analysed_run_dir / "run.json"
    run = json.loads(run_file.read_text())
    run["analysis"] = flat
    run_file.write_text(json.dumps(run))
    assert summarize(analysed_run_dir).run.analysis == info


def test_the_headline_ends_on_the_verdict_per_class(analysed_run_dir) -> None:
    from loadtest.render.headline import headline, headline_text

    summary = summarize(analysed_run_dir)
    numbers = headline(summary)
    assert numbers.verdict == summary.verdict
    last = headline_text(numbers).splitlines()[-len(summary.verdict) :]
    for line, verdict in zip(last, summary.verdict, strict=True):
        assert line == f"  {verdict.prompt_class}: {verdict.decision.value}: {verdict.reason}"


def test_no_gain_is_in_every_format_with_what_the_margin_means_in_usd(analysed_run_dir) -> None:
    from loadtest.render.headline import headline, headline_text

    summary = summarize(analysed_run_dir)
    assert summary.cost is not None and summary.verdict
    first = summary.verdict[0]
    equal = first.cost_ratio.model_copy(update={"estimate": 1.0, "low": 0.98, "high": 1.02})
    no_gain = first.model_copy(
        update={
            "decision": Decision.NO_GAIN,
            "reason": "keep the baseline: inside the equivalence bounds",
            "cost_ratio": equal,
        }
    )
    summary = summary.model_copy(update={"verdict": [no_gain, *summary.verdict[1:]]})
    base = summary.cost.overall.usd_per_million_output_tokens["baseline"]
    assert base is not None
    # 0.05 of the measured baseline cost, and 0.05 / 1.05 of it the other way
    money = (
        f"all {base:,.4g} USD, so SD at most {base * 0.05:,.4g} USD dearer or "
        f"{base * 0.05 / 1.05:,.4g} USD cheaper"
    )
    says = ("statistics.equivalence_margin=0.05", "[0.952, 1.050]", "alpha=0.025 each", money)
    paths = write_report(summary, analysed_run_dir)
    markdown = paths["markdown"].read_text()
    html = paths["html"].read_text()
    console = render_summary_table(summary)
    text = headline_text(headline(summary))
    for rendered in (markdown, html, console, text):
        assert "no gain" in rendered
        for part in says:
            assert part in rendered.replace("&quot;", '"'), part
    # the margin is read before the verdict lines in the headline, which ends on them
    assert text.index("equivalence_margin") < text.index(f"{no_gain.prompt_class}: no gain")
    rows = list(csv.DictReader(paths["csv"].open()))
    verdicts = {r["prompt_class"]: r["value"] for r in rows if r["metric"] == "verdict"}
    assert verdicts[no_gain.prompt_class] == "no gain"
    bounds = {
        r["stat"]: float(r["value"])
        for r in rows
        if r["metric"] == "equivalence_bounds" and r["prompt_class"] == no_gain.prompt_class
    }
    assert bounds == pytest.approx({"low": 1 / 1.05, "high": 1.05})


def test_a_no_gain_class_goes_to_the_baseline_in_the_routing_line(analysed_run_dir) -> None:
    from loadtest.render.decision import routing_text

    summary = summarize(analysed_run_dir)
    classes = [v for v in summary.verdict if v.prompt_class != "all"]
    assert classes
    rows = [
        v.model_copy(update={"decision": Decision.USE_SD if i == 0 else Decision.NO_GAIN})
        for i, v in enumerate(classes)
    ]
    line = routing_text(summary.model_copy(update={"verdict": rows, "floors": None}))
    assert line is not None
    assert f"experiment.routing.speculative_classes={classes[0].prompt_class}`" in line
    for other in classes[1:]:
        assert other.prompt_class not in line.split("speculative_classes=")[1]
    every = [v.model_copy(update={"decision": Decision.NO_GAIN}) for v in classes]
    line = routing_text(summary.model_copy(update={"verdict": every, "floors": None}))
    assert line is not None and "speculative_classes=[]" in line


def test_the_verdict_note_names_a_served_schedule(analysed_run_dir) -> None:
    from loadtest.render.decision import schedule_text, verdict_note

    summary = summarize(analysed_run_dir)
    assert summary.run.analysis is not None
    assert schedule_text(summary) is None  # one k: nothing to add
    info = summary.run.analysis.model_copy(update={"speculation_schedule": [(1, 2, 3), (3, 8, 0)]})
    scheduled = summary.model_copy(
        update={"run": summary.run.model_copy(update={"analysis": info})}
    )
    note = verdict_note(scheduled)
    assert note is not None and "1-2: k=3, 3-8: no speculation" in note
