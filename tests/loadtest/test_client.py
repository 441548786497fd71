"""The streaming client against the scripted server: timing and token truth, and every fault.

Tolerances: the server records its own send times, so client chunk gaps are compared with
the *actual* send gaps (tight: 5 ms, loopback + scheduling on a shared 2-core machine) and
with the *scripted* gaps (looser: 15 ms; the server's own pacing suffers on a busy machine).
Token counts must match exactly.
"""

from __future__ import annotations

import time
from dataclasses import replace
from itertools import pairwise
from statistics import median, quantiles

import pytest

from bench.scripted_server import Fault, Script, unused_loopback_url
from loadtest.client import RequestParams, build_payload, stream_request
from loadtest.metrics import chunk_gaps_s, per_token_itl_s, tpot_s
from loadtest.records import FailureReason, RequestRecord

pytestmark = pytest.mark.process

ACTUAL_TOL_S = 0.005
SCRIPTED_TOL_S = 0.015
TTFT_OVERHEAD_TOL_S = 0.008
# Arrivals are kernel receive stamps (loadtest/transport.py): the kernel stamps a chunk during
# the server's write, before the server reads its clock after the write returns, so the
# overhead below may be a few microseconds negative on loopback, never a millisecond.
KERNEL_STAMP_LEAD_TOL_S = 0.001
SPECULATIVE_SCRIPT = Script(
    ttft_s=0.080, chunk_tokens=[1, 4, 2, 8, 1, 3], gaps_s=[0.030, 0.050, 0.020, 0.060, 0.040]
)


def test_payload_asks_for_exact_token_accounting(params: RequestParams) -> None:
    payload = build_payload("hi", replace(params, temperature=0.0))
    assert payload["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert payload["temperature"] == 0.0 and payload["ignore_eos"] is True
    assert payload["messages"] == [{"role": "user", "content": "hi"}]
    completions = build_payload("hi", replace(params, api="completions"))
    assert completions["prompt"] == "hi" and "messages" not in completions
    with pytest.raises(ValueError, match="use one of"):
        from loadtest.client import endpoint_url

        endpoint_url("http://x", "embeddings")  # type: ignore[arg-type]


@pytest.mark.parametrize("api", ["chat", "completions"])
def test_multi_token_chunks_match_the_scripted_truth(
    serve, session, params, new_record, api
) -> None:
    server = serve(SPECULATIVE_SCRIPT)
    script = SPECULATIVE_SCRIPT
    params = replace(params, api=api)
    # One warm request so the measured ones do not pay for process-level first-use costs.
    stream_request(session, server.url, "warm", params, new_record())
    records = [stream_request(session, server.url, "hi", params, new_record(i)) for i in range(5)]
    sent = server.log[-5:]

    for record in records:  # token accounting is exact, request by request
        assert record.ok, record.error_detail
        assert record.chunk_tokens == script.chunk_tokens
        assert record.output_tokens == script.output_tokens == sum(record.chunk_tokens)
        assert record.token_accounting == "usage"
        assert record.text == "".join(script.token_text(i) for i in range(script.output_tokens))

    # Timing errors are judged on medians over 5 requests (plus a bound on the worst 10%):
    # strict about systematic bias, tolerant of one request descheduled by a busy machine.
    # TTFT: the client starts its clock before sending, the server after reading the body,
    # so the client's TTFT is the server's plus the request's transport (ms on loopback).
    overheads = [
        r.ttft_s - (e.send_times[0] - e.received) for r, e in zip(records, sent, strict=True)
    ]
    assert -KERNEL_STAMP_LEAD_TOL_S <= median(overheads) < TTFT_OVERHEAD_TOL_S
    assert abs(median(r.ttft_s for r in records) - script.ttft_s) < SCRIPTED_TOL_S

    to_actual, to_scripted, itl_errors = [], [], []
    for record, entry in zip(records, sent, strict=True):
        measured_gaps = chunk_gaps_s(record)
        actual_gaps = [b - a for a, b in pairwise(entry.send_times)]
        assert len(measured_gaps) == len(actual_gaps) == len(script.gap_list())
        to_actual += [abs(m - a) for m, a in zip(measured_gaps, actual_gaps, strict=True)]
        to_scripted += [abs(m - g) for m, g in zip(measured_gaps, script.gap_list(), strict=True)]
        # Per-token ITL: chunk j's gap divided over the tokens it carried, one value per token.
        itl = per_token_itl_s(record)
        expected = [
            g / n
            for g, n in zip(script.gap_list(), script.chunk_tokens[1:], strict=True)
            for _ in range(n)
        ]
        assert len(itl) == script.output_tokens - script.chunk_tokens[0]
        itl_errors += [abs(m - t) for m, t in zip(itl, expected, strict=True)]
        # The chunk gaps are NOT per-token latency under speculation: much larger on average.
        assert sum(measured_gaps) / len(measured_gaps) > 2 * (sum(itl) / len(itl))
    assert median(to_actual) < ACTUAL_TOL_S / 2
    assert quantiles(to_actual, n=10)[-1] < 2 * ACTUAL_TOL_S
    assert median(to_scripted) < SCRIPTED_TOL_S / 3
    assert median(itl_errors) < SCRIPTED_TOL_S / 3

    total_scripted = script.ttft_s + sum(script.gap_list())
    assert abs(median(r.e2e_s for r in records) - total_scripted) < SCRIPTED_TOL_S
    truth_tpot = sum(script.gap_list()) / (script.output_tokens - 1)
    assert abs(median(tpot_s(r) for r in records) - truth_tpot) < SCRIPTED_TOL_S / 4


def test_without_per_chunk_usage_counts_are_flagged_inexact(
    serve, session, params, new_record
) -> None:
    script = Script(chunk_tokens=[2, 2, 2], gaps_s=0.01, continuous_usage=False)
    record = stream_request(session, serve(script).url, "x", params, new_record())
    assert record.ok
    assert record.token_accounting == "chunks"
    # The final usage chunk still gives the exact total.
    assert record.output_tokens == 6


@pytest.mark.parametrize(
    ("script", "reason"),
    [
        (Script(fault=Fault.HTTP_ERROR, http_status=503), FailureReason.HTTP_5XX),
        (Script(fault=Fault.HTTP_ERROR, http_status=400), FailureReason.HTTP_4XX),
        (Script(fault=Fault.DISCONNECT, fault_after_chunks=3), FailureReason.DISCONNECTED),
        (Script(fault=Fault.MALFORMED, fault_after_chunks=1), FailureReason.MALFORMED_SSE),
        (Script(fault=Fault.TRUNCATE, fault_after_chunks=2), FailureReason.TRUNCATED_STREAM),
        (Script(fault=Fault.STALL, fault_after_chunks=2, stall_s=5.0), FailureReason.TIMEOUT),
    ],
    ids=lambda value: getattr(value, "value", None) if isinstance(value, FailureReason) else None,
)
def test_each_fault_is_classified_and_bounded(serve, session, new_record, script, reason) -> None:
    params = RequestParams(model="m", max_tokens=8, timeout_s=0.8)
    started = time.monotonic()
    record = stream_request(session, serve(script).url, "x", params, new_record())
    elapsed = time.monotonic() - started
    assert record.error == reason.value, record.error_detail
    assert not record.ok and record.error_detail
    assert elapsed < params.timeout_s + 1.0  # never hangs past the timeout
    if script.fault in (Fault.DISCONNECT, Fault.TRUNCATE):
        # What arrived before the fault is kept (partial records are still informative).
        assert sum(record.chunk_tokens) == sum(script.chunk_tokens[: script.fault_after_chunks])


def test_refused_connection(session, params, new_record) -> None:
    record = stream_request(session, unused_loopback_url(), "x", params, new_record())
    assert record.error == FailureReason.CONNECTION_REFUSED.value


def test_every_request_carries_its_prompt_class_header(serve, session, params) -> None:
    """The tiered gateway routes on routing.class_header: the client sends the record's class
    there (on every arm, so the arms' requests stay identical); no header when unset."""
    server = serve(Script.fixed(4, 1, ttft_s=0.01, gaps_s=0.001))
    with_header = replace(params, class_header="x-prompt-class")
    for index, prompt_class in enumerate(("structured", "open_ended")):
        record = RequestRecord(arm="tiered", index=index, prompt_id="p", prompt_class=prompt_class)
        assert stream_request(session, server.url, "hi", with_header, record).ok
    plain = RequestRecord(arm="baseline", index=2, prompt_id="p", prompt_class="structured")
    assert stream_request(session, server.url, "hi", params, plain).ok
    sent = [entry.headers.get("x-prompt-class") for entry in server.log]
    assert sent == ["structured", "open_ended", None]


@pytest.mark.parametrize("prompt_class", ["a\r\nx-forged: 1", "a\nb", "a\x00"])
def test_a_class_cannot_inject_a_header(serve, session, params, prompt_class) -> None:
    server = serve(Script.fixed(4, 1, ttft_s=0.01, gaps_s=0.001))
    record = RequestRecord(arm="tiered", index=0, prompt_id="p", prompt_class=prompt_class)
    with pytest.raises(ValueError, match="not a valid HTTP field"):
        stream_request(
            session, server.url, "hi", replace(params, class_header="x-prompt-class"), record
        )
    assert server.log == []
