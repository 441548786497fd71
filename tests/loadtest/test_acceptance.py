"""Acceptance from /metrics counter deltas: summed over engines, *_created ignored, n/a not 0."""

from __future__ import annotations

import pytest

from bench.scripted_server import Script, ScriptedServer, unused_loopback_url
from loadtest.acceptance import acceptance_from_deltas, parse_counters, scrape

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
    result = acceptance_from_deltas(before, after)
    assert result.available is True
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


@pytest.mark.parametrize(
    ("before", "after", "reason"),
    [
        ({}, {}, "no vllm:spec_decode"),
        (None, None, "no vllm:spec_decode"),
        ({"num_drafts": 1.0}, None, "could not be scraped"),
        (
            {"num_drafts": 5.0, "num_draft_tokens": 35.0, "num_accepted_tokens": 9.0},
            {"num_drafts": 5.0, "num_draft_tokens": 35.0, "num_accepted_tokens": 9.0},
            "no speculative steps",
        ),
    ],
)
def test_not_available_is_none_never_zero(before, after, reason) -> None:
    result = acceptance_from_deltas(before, after)
    assert result.available is False
    assert result.acceptance_rate is None and result.mean_acceptance_length is None
    assert reason in result.reason


@pytest.mark.process
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
    assert result.drafts == truth["drafts"] == 12
    assert result.acceptance_rate == pytest.approx(truth["accepted"] / truth["draft_tokens"])
    # mean acceptance length = tokens per target step = mean tokens per chunk here
    assert result.mean_acceptance_length == pytest.approx(14 / 4)
    assert scrape(unused_loopback_url()) is None
