"""Acceptance from /metrics counter deltas: summed over engines, *_created ignored, n/a not 0,
and its source (measured / estimated / not available) for the three kinds of server: the fork
(no counters), vllm-neuron 0.2.x (counters frozen) and vllm-neuron 1.x (counters live)."""

from __future__ import annotations

import pytest

from bench.scripted_server import Script, ScriptedServer, unused_loopback_url
from loadtest.acceptance import acceptance_from_deltas, parse_counters, scrape
from loadtest.results import AcceptanceSource

VLLM_TEXT = """\
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 10.0
vllm:spec_decode_num_drafts_created{engine="0",model_name="m"} 1.75e9
vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 30.0
vllm:spec_decode_num_drafts_created{engine="1",model_name="m"} 1.75e9
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 70.0
vllm:spec_decode_num_draft_tokens_total{engine="1",model_name="m"} 210.0
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 40.0
vllm:spec_decode_num_accepted_tokens_total{engine="1",model_name="m"} 100.0
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 9.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="m",position="0"} 27.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 7.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="10"} 1.0
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="m"} 999.0
"""


def test_parse_sums_engines_and_ignores_created() -> None:
    counters = parse_counters(VLLM_TEXT)
    assert counters["num_drafts"] == 40.0  # not 40 + 2 * 1.75e9
    assert counters["num_draft_tokens"] == 280.0
    assert counters["num_accepted_tokens"] == 140.0
    assert counters["num_accepted_tokens_per_pos"] == {0: 36.0, 1: 7.0, 10: 1.0}


def test_deltas_give_rate_length_and_positions() -> None:
    before = {
        "num_drafts": 10.0,
        "num_draft_tokens": 70.0,
        "num_accepted_tokens": 20.0,
        "num_accepted_tokens_per_pos": {0: 5.0, 1: 2.0},
    }
    after = parse_counters(VLLM_TEXT)
    result = acceptance_from_deltas(before, after, decode_tokens=500)
    assert result.available is True and result.source is AcceptanceSource.MEASURED
    assert result.reason is None
    assert result.acceptance_rate == pytest.approx(120 / 210)
    assert result.mean_acceptance_length == pytest.approx(1 + 120 / 30)
    # positions sorted numerically (10 after 1), each divided by the drafts delta
    assert result.per_position_rate == pytest.approx([31 / 30, 5 / 30, 1 / 30])


def test_json_round_tripped_positions_still_match() -> None:
    before = {
        "num_drafts": 0.0,
        "num_draft_tokens": 0.0,
        "num_accepted_tokens": 0.0,
        "num_accepted_tokens_per_pos": {"0": 1.0, "2": 0.0, "10": 0.0},
    }
    after = {
        "num_drafts": 4.0,
        "num_draft_tokens": 28.0,
        "num_accepted_tokens": 6.0,
        "num_accepted_tokens_per_pos": {"0": 5.0, "2": 2.0, "10": 0.0},
    }
    assert acceptance_from_deltas(before, after).per_position_rate == [1.0, 0.5, 0.0]


FROZEN = {
    "num_drafts": 0.0,
    "num_draft_tokens": 0.0,
    "num_accepted_tokens": 0.0,
    "num_accepted_tokens_per_pos": {0: 0.0, 1: 0.0},
}


@pytest.mark.parametrize(
    ("before", "after", "kwargs", "source", "reason"),
    [
        # The fork: no counters at all -> the labelled client-side estimate stands in.
        ({}, {}, {"decode_tokens": 900}, AcceptanceSource.ESTIMATED, "client-side estimate"),
        # The baseline has no counters either, but it does not speculate: nothing to estimate.
        (
            {},
            {},
            {"speculative": False, "decode_tokens": 900},
            AcceptanceSource.NOT_AVAILABLE,
            "does not speculate",
        ),
        # vllm-neuron 0.2.x: registered, never incremented, while the arm generated tokens.
        (FROZEN, FROZEN, {"decode_tokens": 900}, AcceptanceSource.NOT_AVAILABLE, "frozen"),
        (None, None, {}, AcceptanceSource.NOT_AVAILABLE, "could not be scraped"),
        ({"num_drafts": 1.0}, None, {}, AcceptanceSource.NOT_AVAILABLE, "could not be scraped"),
        # Counters that did not move because nothing was decoded are not frozen.
        (
            {"num_drafts": 5.0, "num_draft_tokens": 35.0, "num_accepted_tokens": 9.0},
            {"num_drafts": 5.0, "num_draft_tokens": 35.0, "num_accepted_tokens": 9.0},
            {"decode_tokens": 0},
            AcceptanceSource.NOT_AVAILABLE,
            "no speculative steps",
        ),
        ({}, {"num_drafts": 1.0}, {}, AcceptanceSource.NOT_AVAILABLE, "counters missing"),
    ],
)
def test_not_available_is_none_never_zero(before, after, kwargs, source, reason) -> None:
    result = acceptance_from_deltas(before, after, **kwargs)
    assert result.available is False and result.source is source
    assert result.acceptance_rate is None and result.mean_acceptance_length is None
    assert result.per_position_rate is None
    assert reason in (result.reason or "")


def test_available_and_source_cannot_contradict_each_other() -> None:
    from pydantic import ValidationError

    from loadtest.results import Acceptance

    with pytest.raises(ValidationError, match="contradicts source 'estimated'"):
        Acceptance(available=True, source=AcceptanceSource.ESTIMATED)
    # Summaries before schema 5 carry no source: it follows from "available".
    assert Acceptance(available=True).source is AcceptanceSource.MEASURED
    assert Acceptance(available=False).source is AcceptanceSource.NOT_AVAILABLE


def test_scrape_the_scripted_server_matches_its_truth() -> None:
    script = Script(chunk_tokens=[1, 3, 8, 2], gaps_s=0.0, ttft_s=0.0)
    with ScriptedServer(script, spec_decode_k=7) as server, ScriptedServer(script) as baseline:
        before = scrape(server.url)
        from loadtest.client import RequestParams, stream_request
        from loadtest.records import RequestRecord
        from loadtest.transport import StreamSession

        with StreamSession() as session:
            for i in range(3):
                stream_request(
                    session,
                    server.url,
                    "x",
                    RequestParams(model="m", max_tokens=14),
                    RequestRecord("speculative", i, "p", "c"),
                )
        after = scrape(server.url)
        truth = server.spec_decode_truth()
        assert scrape(baseline.url) == {}
    result = acceptance_from_deltas(before, after)
    assert result.source is AcceptanceSource.MEASURED
    assert result.drafts == truth["drafts"] == 12
    assert result.acceptance_rate == pytest.approx(truth["accepted"] / truth["draft_tokens"])
    # mean acceptance length = tokens per target step = mean tokens per chunk here
    assert result.mean_acceptance_length == pytest.approx(14 / 4)
    assert scrape(unused_loopback_url()) is None


# --- The three kinds of server, end to end: summary, report, CloudWatch datums. ------------

LIVE_BEFORE = {
    "num_drafts": 10.0,
    "num_draft_tokens": 70.0,
    "num_accepted_tokens": 20.0,
    "num_accepted_tokens_per_pos": {"0": 8.0, "1": 5.0},
}
LIVE_AFTER = {
    "num_drafts": 50.0,
    "num_draft_tokens": 350.0,
    "num_accepted_tokens": 100.0,
    "num_accepted_tokens_per_pos": {"0": 40.0, "1": 25.0},
}
# What the speculative arm's /metrics showed before and after its window (the baseline's
# shows no spec-decode counters in every case).
SERVERS = {
    "fork": ({}, {}),
    "vllm-neuron-0.2": (FROZEN, FROZEN),
    "vllm-neuron-1.x": (LIVE_BEFORE, LIVE_AFTER),
}


def _server_run(run_dir, server: str):
    import json

    from experiment import build_config
    from loadtest.analysis import analysis_info
    from loadtest.summary import summarize

    run_file = run_dir / "run.json"
    run = json.loads(run_file.read_text())
    run["analysis"] = analysis_info(build_config({})).model_dump(mode="json")
    run_file.write_text(json.dumps(run))
    window = run_dir / "window_speculative.json"
    meta = json.loads(window.read_text())
    meta["metrics_before"], meta["metrics_after"] = SERVERS[server]
    window.write_text(json.dumps(meta))
    return summarize(run_dir)


@pytest.mark.parametrize(
    ("server", "source"),
    [
        ("fork", AcceptanceSource.ESTIMATED),
        ("vllm-neuron-0.2", AcceptanceSource.NOT_AVAILABLE),
        ("vllm-neuron-1.x", AcceptanceSource.MEASURED),
    ],
)
def test_each_server_kind_reports_its_acceptance_source_everywhere(
    fake_run_dir, server, source
) -> None:
    from datetime import UTC, datetime

    from experiment import build_config
    from loadtest.cloudwatch import build_metric_data
    from loadtest.render.headline import headline, headline_text
    from loadtest.render.tables import acceptance_rows

    summary = _server_run(fake_run_dir, server)
    sd = summary.arm("speculative").acceptance
    assert sd.source is source
    assert summary.arm("baseline").acceptance.source is AcceptanceSource.NOT_AVAILABLE
    estimate = summary.statistics.overall.acceptance_rate_estimate.estimate
    assert estimate is not None  # the client-side estimate is computed in every case ...

    header, rows = acceptance_rows(summary)
    sd_row = dict(zip(header, rows[1], strict=True))
    assert sd_row["source"] == source.value
    text = headline_text(headline(summary))
    names = build_config({}).loadtest.metric_names
    published = {
        d["MetricName"]
        for d in build_metric_data(build_config({}), fake_run_dir, summary, datetime.now(UTC))
    }
    if source is AcceptanceSource.MEASURED:
        # 1.x: the counters' deltas, per position too; the estimate is not published beside them.
        assert sd.acceptance_rate == pytest.approx(80 / 280)
        assert sd.mean_acceptance_length == pytest.approx(1 + 80 / 40)
        assert sd.per_position_rate == pytest.approx([32 / 40, 20 / 40])
        assert sd_row["acceptance rate"] == f"{80 / 280:.3f}"
        assert f"acceptance rate: {80 / 280:.1%} (measured;" in text
        assert {names.acceptance_rate, names.mean_acceptance_length} <= published
        assert names.acceptance_rate_estimate not in published
    elif source is AcceptanceSource.ESTIMATED:
        # The fork: labelled client-side estimate in the report and for the per-class alarms.
        assert sd.acceptance_rate is None
        assert "client-side estimate" in sd_row["note"] and f"{estimate:.3f}" in sd_row["note"]
        assert "acceptance rate: n/a (estimated;" in text
        assert names.acceptance_rate_estimate in published
        assert names.acceptance_rate not in published
    else:
        # 0.2.x: "not available" with the reason, never 0, and nothing an alarm could read.
        assert sd.acceptance_rate is None and sd.per_position_rate is None
        assert "frozen" in (sd.reason or "")
        assert sd_row["acceptance rate"] == "not available"
        assert (
            "client-side estimate" not in sd_row["note"]
        )  # ... but it stands in only for the fork
        assert "acceptance rate: n/a (not available;" in text
        assert not published & {
            names.acceptance_rate,
            names.mean_acceptance_length,
            names.acceptance_rate_estimate,
        }
