"""The bench's own arithmetic: matching to ground truth, error definitions, load figures."""

from __future__ import annotations

import pytest

from bench.accuracy import (
    Observation,
    Truth,
    compute_errors,
    load_figures,
    match,
    percentiles,
    summarize_errors,
)

SENDS = [10.050, 10.070, 10.090]  # three chunks, 20 ms apart
TOKENS = [1, 3, 2]


def truth(index: int = 0, offset: float = 0.0) -> Truth:
    return Truth(
        index=index,
        received=10.0 + offset,
        send_times=[t + offset for t in SENDS],
        chunk_tokens=list(TOKENS),
    )


def observed(
    tag: int | None = 0,
    delays: list[float] | None = None,
    offset: float = 0.0,
    chunk_tokens: list[int] | None = TOKENS,
    output_tokens: int | None = 6,
    error: str | None = None,
) -> Observation:
    delays = delays or [0.0, 0.0, 0.0]
    arrivals = [t + offset + d for t, d in zip(SENDS, delays, strict=True)]
    return Observation(
        tag=tag,
        start=9.999 + offset,
        chunk_arrivals=arrivals,
        chunk_tokens=list(chunk_tokens) if chunk_tokens else None,
        output_tokens=output_tokens,
        end=arrivals[-1] + 0.0001,
        error=error,
    )


def test_constant_delivery_delay_is_a_ttft_error_but_not_an_itl_error() -> None:
    errors = compute_errors([observed(delays=[0.0005] * 3)], [truth()])
    assert errors.ttft_ms == pytest.approx([0.5])
    assert errors.chunk_gap_ms == pytest.approx([0.0, 0.0])
    assert errors.itl_token_ms == pytest.approx([0.0] * 5)  # 3 + 2 tokens after the first chunk
    assert errors.e2e_ms == pytest.approx([0.6])
    assert errors.request_path_ms == pytest.approx([1.0])
    assert errors.token_count == [0]


def test_late_chunk_shows_in_gaps_and_per_token_itl_weighted_by_tokens() -> None:
    errors = compute_errors([observed(delays=[0.0, 0.003, 0.0])], [truth()])
    assert errors.chunk_gap_ms == pytest.approx([3.0, -3.0])
    # chunk 1 carries 3 tokens: its 3 ms gap error is 1 ms per token, once per token
    assert errors.itl_token_ms == pytest.approx([1.0, 1.0, 1.0, -1.5, -1.5])


def test_instrument_without_chunk_token_counts_reports_the_chunk_gap_as_itl() -> None:
    errors = compute_errors([observed(chunk_tokens=None)], [truth()])
    # true per-token ITL of the 3-token chunk is 20/3 ms; a chunk gap of 20 ms is 13.33 ms off
    assert errors.itl_token_ms == pytest.approx([40 / 3] * 3 + [10.0] * 2)
    assert errors.chunk_gap_ms == pytest.approx([0.0, 0.0])


def test_miscounted_chunk_tokens_show_as_itl_error() -> None:
    errors = compute_errors([observed(chunk_tokens=[1, 1, 1])], [truth()])
    assert errors.itl_token_ms[:3] == pytest.approx([40 / 3] * 3)


def test_token_count_error_is_reported_minus_sent() -> None:
    errors = compute_errors(
        [observed(output_tokens=5), observed(tag=1, output_tokens=None, offset=1.0)],
        [truth(), truth(index=1, offset=1.0)],
    )
    assert errors.token_count == [-1]  # the second instrument reported no count
    summary = summarize_errors(errors)
    assert summary["token_count"]["mismatched_requests"] == 1
    assert summary["token_count"]["requests_with_count"] == 1


def test_matching_is_by_tag_not_by_order_and_counts_what_cannot_be_matched() -> None:
    truths = [truth(index=0), truth(index=1, offset=5.0)]
    observations = [
        observed(tag=1, offset=5.0, delays=[0.001] * 3),  # finished first, server request 1
        observed(tag=0),
        observed(tag=0),  # the same server request twice: a bug upstream, counted
        observed(tag=None),  # untagged text
        observed(tag=7),  # a tag the server never sent
        observed(error="timeout"),
    ]
    pairs, errors = match(observations, truths)
    assert [(obs.tag, t.index) for obs, t in pairs] == [(1, 1), (0, 0)]
    assert (errors.matched, errors.duplicate_tags, errors.untagged, errors.failed) == (2, 1, 2, 1)
    full = compute_errors(observations, truths)
    assert full.ttft_ms == pytest.approx([1.0, 0.0])


def test_chunk_count_mismatch_skips_chunk_errors_but_keeps_ttft() -> None:
    obs = observed()
    obs.chunk_arrivals = obs.chunk_arrivals[:2]
    errors = compute_errors([obs], [truth()])
    assert errors.unaligned_chunks == 1
    assert errors.chunk_gap_ms == [] and errors.itl_token_ms == []
    assert errors.ttft_ms == pytest.approx([0.0])


def test_observation_without_content_is_a_failure() -> None:
    obs = Observation(tag=0, start=1.0)
    assert not obs.ok
    assert compute_errors([obs], [truth()]).failed == 1


def test_load_figures_concurrency_and_throughput() -> None:
    a = Observation(tag=0, start=0.0, chunk_arrivals=[0.1], end=1.0)
    b = Observation(tag=1, start=0.0, chunk_arrivals=[0.1], end=2.0)
    truths = [Truth(index=i, received=0.0, send_times=[0.1], chunk_tokens=[5, 5]) for i in range(2)]
    figures = load_figures([a, b, Observation(tag=2, start=0.0, error="x")], truths)
    assert figures["window_s"] == pytest.approx(2.0)
    assert figures["achieved_streams"] == pytest.approx(1.5)
    assert figures["tokens_per_s"] == pytest.approx(10.0)
    assert figures["requests_per_s"] == pytest.approx(1.0)
    assert load_figures([], truths)["achieved_streams"] == 0.0


def test_percentiles_of_nothing_are_none() -> None:
    assert percentiles([])["p99"] is None
    stats = percentiles([1.0, -3.0])
    assert stats["max_abs"] == 3.0 and stats["n"] == 2


def test_one_itl_per_request_is_compared_with_every_tokens_true_itl() -> None:
    # AIPerf reports one mean ITL per request: 8 ms against true ITLs of 20/3 and 20/2 ms.
    obs = observed(chunk_tokens=None)
    obs.request_itl_s = 0.008
    errors = compute_errors([obs], [truth()])
    assert errors.itl_token_ms == pytest.approx([8.0 - 20.0 / 3] * 3 + [8.0 - 10.0] * 2)
    assert errors.chunk_gap_ms == pytest.approx([0.0, 0.0])  # its chunk times stay exact
    summary = summarize_errors(errors)
    assert summary["reported"] == {"chunk_times": 3.0, "itl_values": 1.0, "chunk_tokens": False}


def test_reported_says_what_each_instrument_gave_per_request() -> None:
    ours = summarize_errors(compute_errors([observed()], [truth()]))["reported"]
    chunk_gaps_only = summarize_errors(compute_errors([observed(chunk_tokens=None)], [truth()]))
    assert ours == {"chunk_times": 3.0, "itl_values": 2.0, "chunk_tokens": True}
    assert chunk_gaps_only["reported"]["chunk_tokens"] is False
    assert summarize_errors(compute_errors([], []))["reported"]["chunk_times"] is None
