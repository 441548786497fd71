"""The tiered arm in the summary and the report, from synthetic records: per class against
the baseline and SD with paired intervals, the match check, its lossless check and failures.

Structured prompts are 3x faster on SD; open-ended ones are not. A tiered arm that routes
structured to SD and open-ended to the baseline matches both; one that sends everything to
the baseline misses on structured.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from experiment import build_config
from experiment.config import TIERED_ARM, ArmsMode, StatisticsConfig
from loadtest.analysis import analysis_info
from loadtest.plan import arm_time_budget, build_plan
from loadtest.records import RequestRecord, write_records
from loadtest.render.console import render_summary_table
from loadtest.render.csv import write_csv
from loadtest.render.markdown import render_markdown
from loadtest.render.tiered import gateway_text, tiered_lines, tiered_rows
from loadtest.results import GatewayCost, RunSummary, TieredRouting
from loadtest.runner import exit_code
from loadtest.summary import GATEWAY_JSON, summarize
from loadtest.tiered import tiered_comparison

PAIRS = 16  # per class, like the local run
TOKENS = 8
CLASSES = ("structured", "open_ended")
ROUTING = TieredRouting(class_header="x-prompt-class", speculative_classes=["structured"])


def _e2e(arm: str, index: int, prompt_class: str, tiered_routes: dict[str, str]) -> float:
    """Seconds: prompts differ by up to 3x; SD is 3x faster on structured only; each arm
    gets its own few-percent jitter per request."""
    base = 1.0 + 0.5 * (index % 5)
    jitter = {"baseline": 0, "speculative": 1, "tiered": 2}[arm]
    noise = 1 + 0.02 * (((index + jitter) * 7) % 5 - 2)
    served = tiered_routes[prompt_class] if arm == "tiered" else arm
    speedup = 3.0 if served == "speculative" and prompt_class == "structured" else 1.0
    return base / speedup * noise


def _record(arm: str, index: int, seconds: float, *, text: str, error: str | None = None):
    prompt_class = CLASSES[index % 2]
    times = [seconds * (j + 1) / TOKENS for j in range(TOKENS)]
    return RequestRecord(
        arm=arm,
        index=index,
        prompt_id=f"{prompt_class}-{index}",
        prompt_class=prompt_class,
        max_tokens=TOKENS,
        start=index * 4.0,
        wall_start=1000.0 + index * 4.0,
        ttft_s=None if error else times[0],
        e2e_s=seconds,
        chunk_times=[] if error else times,
        chunk_tokens=[] if error else [1] * TOKENS,
        chunk_texts=[] if error else [text[j::TOKENS] for j in range(TOKENS)],
        output_tokens=None if error else TOKENS,
        error=error,
    )


def _records(
    arm: str, routes: dict[str, str], *, diverge: int | None = None, fail: int | None = None
) -> list[RequestRecord]:
    out = []
    for index in range(2 * PAIRS):
        text = f"answer to prompt {index:02d} ok"
        if index == diverge:
            text = f"answer to prompt {index:02d} no"
        out.append(
            _record(
                arm,
                index,
                _e2e(arm, index, CLASSES[index % 2], routes),
                text=text,
                error="http_5xx" if index == fail else None,
            )
        )
    return out


ROUTED = {"structured": "speculative", "open_ended": "baseline"}
ALL_BASELINE = {"structured": "baseline", "open_ended": "baseline"}


@pytest.fixture
def tiered_run(tmp_path: Path, write_run_json) -> Callable[..., RunSummary]:
    """``tiered_run(routes, diverge=, fail=)``: the summary of a run directory whose tiered
    arm sends each class to ``routes[class]``."""

    def make(routes: dict[str, str], **faults: int) -> RunSummary:
        config = build_config({})
        write_run_json(
            tmp_path,
            variant_labels={"baseline": "Base", "speculative": "SD"},
            prompt_files=[],
            analysis=analysis_info(config, local=True).model_dump(mode="json"),
        )
        run = json.loads((tmp_path / "run.json").read_text())
        run["urls"][TIERED_ARM] = "http://t"
        run["variant_labels"][TIERED_ARM] = config.loadtest.tiered_label
        run["tiered"] = ROUTING.model_dump()
        (tmp_path / "run.json").write_text(json.dumps(run))
        for arm in ("baseline", "speculative"):
            write_records(tmp_path / f"records_{arm}.jsonl", _records(arm, routes))
        write_records(tmp_path / "records_tiered.jsonl", _records("tiered", routes, **faults))
        for arm in ("baseline", "speculative", TIERED_ARM):
            window = {"arm": arm, "stopped_by": "schedule_done"}
            (tmp_path / f"window_{arm}.json").write_text(json.dumps(window))
        return summarize(tmp_path)

    return make


def test_a_tiered_arm_routed_by_class_matches_sd_and_the_baseline(tiered_run) -> None:
    summary = tiered_run(ROUTED)
    assert list(summary.arms) == ["baseline", "speculative", TIERED_ARM]
    assert summary.arms[TIERED_ARM].label == "Tiered"
    assert summary.arms[TIERED_ARM].acceptance.available is False
    tiered = summary.tiered
    assert tiered is not None and tiered.routing == ROUTING
    structured, open_ended = tiered.by_class["structured"], tiered.by_class["open_ended"]
    assert structured.routed_to == "speculative" and open_ended.routed_to == "baseline"
    assert structured.vs_baseline.n == open_ended.vs_baseline.n == PAIRS
    # Structured: about SD's 3x over the baseline, and no different from SD itself.
    assert structured.vs_baseline.estimate == pytest.approx(3.0, rel=0.05)
    assert structured.vs_speculative.low < 1 < structured.vs_speculative.high
    assert structured.speculative_vs_baseline is not None
    assert structured.held is True, structured.reason
    # Open-ended: the baseline's, 3x slower than SD would have been on structured.
    assert open_ended.vs_baseline.low < 1 < open_ended.vs_baseline.high
    assert open_ended.held is True, open_ended.reason
    assert tiered.lossless.exact_match_rate == 1.0
    assert tiered.lossless.prompts_compared == 2 * PAIRS
    assert not [w for w in summary.warnings if w.startswith("tiered")]
    assert exit_code(summary, 0.0) == 0


def test_a_class_sent_to_the_wrong_arm_does_not_hold_and_warns(tiered_run) -> None:
    summary = tiered_run(ALL_BASELINE)
    structured = summary.tiered.by_class["structured"]
    assert structured.held is False
    assert "outside SD's interval" in structured.reason
    assert structured.vs_speculative.high < 1  # SD is faster than this tiered arm
    assert summary.tiered.by_class["open_ended"].held is True
    assert any(
        "tiered: structured does not match the speculative arm" in w for w in summary.warnings
    )


def test_tiered_lossless_and_failures_count_like_the_other_arms(tiered_run) -> None:
    summary = tiered_run(ROUTED, diverge=3, fail=4)
    tiered = summary.tiered
    assert tiered.lossless.exact_matches == tiered.lossless.prompts_compared - 1 == 2 * PAIRS - 2
    assert [m.prompt_id for m in tiered.lossless.mismatches] == ["open_ended-3"]
    assert summary.lossless.exact_match_rate == 1.0  # SD's own check is untouched
    assert tiered.unpaired == 1
    assert summary.arms[TIERED_ARM].overall.failed == 1
    assert exit_code(summary, 0.0) == 1  # a failed tiered request fails the run like any arm's
    assert any(w.startswith("tiered: 1 failed requests") for w in summary.warnings)


def test_too_few_pairs_cannot_tell() -> None:
    base, sd, tier = (_records(arm, ROUTED)[:4] for arm in ("baseline", "speculative", "tiered"))
    comparison = tiered_comparison(
        ROUTING, base, sd, tier, statistics=None, settings=StatisticsConfig(), temperature=0.0
    )
    for check in comparison.by_class.values():
        assert check.held is None and check.reason.startswith("can't tell")


def test_the_report_shows_tiered_per_class_in_every_format(tiered_run, tmp_path: Path) -> None:
    summary = tiered_run(ALL_BASELINE, diverge=3)
    header, rows = tiered_rows(summary)
    assert [row[0] for row in rows] == ["open_ended", "structured"]
    assert [row[header.index("matches its arm")] for row in rows] == ["held", "did not hold"]
    markdown = render_markdown(summary, [])
    assert "## Tiered arm: per class vs baseline and SD" in markdown
    assert "Lossless mismatches (tiered vs baseline)" in markdown
    assert "lossless (tiered output == baseline output): 97% (31/32 prompts)" in markdown
    console = render_summary_table(summary)
    assert "did not hold" in console and "x-prompt-class" in console
    assert any(
        line.startswith("tiered, structured prompts (routed to SD)")
        for line in tiered_lines(summary)
    )
    write_csv(summary, tmp_path / "summary.csv")
    with (tmp_path / "summary.csv").open() as handle:
        rows_csv = list(csv.DictReader(handle))
    held = {r["prompt_class"]: r["value"] for r in rows_csv if r["metric"] == "held"}
    assert held == {"open_ended": "True", "structured": "False"}
    assert any(r["arm"] == TIERED_ARM for r in rows_csv)


def test_a_run_without_the_tiered_arm_reports_as_before(fake_run_dir: Path) -> None:
    summary = summarize(fake_run_dir)
    assert summary.tiered is None and list(summary.arms) == ["baseline", "speculative"]
    assert tiered_rows(summary)[1] == [] and tiered_lines(summary) == []
    assert "Tiered" not in render_markdown(summary, [])
    assert "tiered" not in render_summary_table(summary)


def test_the_tiered_plan_is_the_arms_plan_with_its_own_url_and_label(tmp_path: Path) -> None:
    config = build_config({})
    base = build_plan(config, "baseline", "http://b", tmp_path, tiered=True)
    tiered = build_plan(config, TIERED_ARM, "http://t/", tmp_path, tiered=True)
    assert tiered.arm == TIERED_ARM and tiered.base_url == "http://t"
    assert tiered.variant_label == config.loadtest.tiered_label
    assert tiered.schedule == base.schedule and tiered.params == base.params
    assert tiered.params.class_header == config.routing.class_header
    assert tiered.records_path.endswith("records_tiered.jsonl")
    with pytest.raises(ValueError, match="use one of"):
        build_plan(config, "gateway", "http://t", tmp_path)


@pytest.mark.parametrize(("mode", "turns"), [(ArmsMode.SEQUENTIAL, 3), (ArmsMode.CONCURRENT, 2)])
def test_the_tiered_arm_takes_its_turn_of_the_time_bound(tmp_path: Path, mode, turns) -> None:
    config = build_config({"experiment.loadtest.arms_mode": mode.value})
    total = config.loadtest.max_duration_s
    plain = build_plan(config, "baseline", "http://b", tmp_path)
    tiered = build_plan(config, TIERED_ARM, "http://t", tmp_path, tiered=True)
    assert plain.shape.max_duration_s == arm_time_budget(total, turns - 1)
    assert tiered.shape.max_duration_s == arm_time_budget(total, turns)


GATEWAY = GatewayCost(
    requests=66,
    cpu_s=0.2,
    cpu_ms_per_request=3.03,
    downstream_mean_ms=812.4,
    upstream_mean_ms=811.9,
    added_ms_per_request=0.5,
    gateway_cores=[0, 1],
    server_cores={"baseline": [0], "speculative": [1]},
    machine_cores=[0, 1],
    cpu_binding="isolated",
)


def test_the_gateways_measured_cost_is_read_into_the_summary_and_reported(
    tiered_run, tmp_path: Path
) -> None:
    (tmp_path / GATEWAY_JSON).write_text(GATEWAY.model_dump_json())
    summary = tiered_run(ROUTED)
    assert summary.tiered is not None and summary.tiered.gateway == GATEWAY
    line = tiered_lines(summary)[-1]
    assert line.startswith("gateway cost during the tiered arm: 3.03 ms CPU per request")
    assert "added 0.50 ms per request (mean 812.40 ms through it - 811.90 ms" in line
    assert "gateway on cores 0,1, servers (cpu_binding isolated): baseline 0, speculative 1" in line
    assert "shares a core with baseline and speculative (unavoidable here" in line
    assert line in render_markdown(summary, [])


def test_a_gateway_with_a_core_of_its_own_is_said_to_share_none() -> None:
    alone = GATEWAY.model_copy(update={"gateway_cores": [2], "machine_cores": [0, 1, 2]})
    text = gateway_text(alone)
    assert text.endswith("it shares no core with a server")
    unmeasured = GATEWAY.model_copy(
        update={"downstream_mean_ms": None, "added_ms_per_request": None}
    )
    assert "added latency not measured" in gateway_text(unmeasured)


def test_a_tiered_run_without_the_meter_says_its_gateway_cost_was_not_measured(
    tiered_run,
) -> None:
    summary = tiered_run(ROUTED)
    assert summary.tiered is not None and summary.tiered.gateway is None
    assert tiered_lines(summary)[-1] == "gateway cost: not measured in this run"


def test_the_runner_meters_the_gateway_around_the_tiered_arm_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from loadtest import runner

    events: list[str] = []

    def run_arms(plans, *args, **kwargs) -> None:
        events.append("arms " + ",".join(plan.arm for plan in plans))

    class Meter:
        def begin(self) -> None:
            events.append("begin")

        def end(self) -> GatewayCost:
            events.append("end")
            return GATEWAY

    monkeypatch.setattr(runner, "run_arms", run_arms)  # no Locust here
    monkeypatch.setattr(runner, "write_report", lambda *args, **kwargs: None)
    out = tmp_path / "run"
    summary = runner.run_comparison(
        build_config({}), "http://b", "http://s", out, tiered_url="http://t", gateway_meter=Meter()
    )
    assert events == ["arms baseline,speculative", "begin", f"arms {TIERED_ARM}", "end"]
    assert GatewayCost.model_validate_json((out / GATEWAY_JSON).read_text()) == GATEWAY
    assert summary.tiered is not None and summary.tiered.gateway == GATEWAY
