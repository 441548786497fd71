"""Per-token latency from the arms' own vLLM histograms (loadtest/server_latency.py): parsing
a /metrics body (malformed lines counted, never raised), window deltas, interpolated
quantiles with their buckets, the unpaired interval, per-class figures from blocks of one
class, and the summary and report choosing the source when the client's chunks burst."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import requests

from guardrails import vllm_metrics
from loadtest.records import RequestRecord, read_records, write_records
from loadtest.render.decision import verdict_rows
from loadtest.render.headline import headline, headline_text
from loadtest.render.markdown import render_markdown
from loadtest.results import LatencySource, RunSummary
from loadtest.server_latency import (
    Histogram,
    HistogramDelta,
    ScrapeWindow,
    ServerScrape,
    arm_server_latency,
    histogram_delta,
    parse_histograms,
    scrape_window,
    window_delta,
)
from loadtest.summary import summarize

TPOT = vllm_metrics.TIME_PER_OUTPUT_TOKEN
ITL = vllm_metrics.INTER_TOKEN_LATENCY
TTFT = vllm_metrics.TIME_TO_FIRST_TOKEN


def test_a_vllm_body_is_summed_over_engines(metrics_text: Any) -> None:
    values = [0.012, 0.018, 0.03, 0.2, 7.0]
    scrape = parse_histograms(metrics_text({TPOT: values}, 42.0))
    assert scrape.malformed_lines == 0 and scrape.error is None
    tpot = scrape.histograms[TPOT]
    assert tpot.count == 5 and tpot.sum == pytest.approx(sum(values))
    cumulative = dict(zip(tpot.edges, tpot.cumulative, strict=True))
    assert cumulative[0.01] == 0 and cumulative[0.025] == 2 and cumulative[5.0] == 4
    assert scrape.generation_tokens == 42.0
    assert set(scrape.histograms) == set(vllm_metrics.LATENCY_HISTOGRAMS)


def test_malformed_lines_are_counted_and_skipped(metrics_text: Any) -> None:
    body = metrics_text({TPOT: [0.02, 0.03]}, 10.0)
    body += f"{TTFT}_sum{{engine=0}} 1.0\n"  # unquoted label value
    body += f"{vllm_metrics.GENERATION_TOKENS}_total{{}} many\n"  # not a number
    body += "some_other_family{a=} ???\n"  # not ours: not even looked at
    scrape = parse_histograms(body)
    assert scrape.malformed_lines == 2
    assert scrape.histograms[TPOT].count == 2
    assert scrape.generation_tokens == 10.0


def test_a_histogram_that_contradicts_itself_is_dropped_and_counted(metrics_text: Any) -> None:
    body = metrics_text({TPOT: [0.02, 0.03]}, 10.0)
    # The +Inf bucket no longer equals the count on engine 0.
    broken = body.replace(f'{TPOT}_count{{engine="0",model_name="tiny"}} 1.0', "")
    scrape = parse_histograms(broken.replace(f'{TPOT}_bucket{{engine="1"', f'{TPOT}_bucket{{x="1"'))
    assert TPOT not in scrape.histograms
    assert scrape.malformed_lines >= 1
    assert parse_histograms("\x00\x01 not prometheus at all {{{").histograms == {}


class _Response:
    def __init__(self, text: str, status: int = 200) -> None:
        self.text, self.status = text, status

    def raise_for_status(self) -> None:
        if self.status >= 400:
            raise requests.HTTPError(f"{self.status}")


class _Session:
    def __init__(self, response: _Response | Exception) -> None:
        self.response = response

    def get(self, url: str, timeout: float) -> _Response:
        if isinstance(self.response, Exception):
            raise self.response
        return self.response


def test_a_scrape_never_raises(metrics_text: Any) -> None:
    counters, scrape = scrape_window("http://s", _Session(_Response(metrics_text({}, 1.0))))
    assert counters == {} and scrape.error is None and scrape.generation_tokens == 1.0
    refused = requests.ConnectionError("refused")
    counters, scrape = scrape_window("http://s", _Session(refused))
    assert counters is None and scrape.error is not None and "refused" in scrape.error
    counters, scrape = scrape_window("http://s", _Session(_Response("", 503)))
    assert counters is None and scrape.error is not None
    # A body prometheus_client's parser refuses: no counters, the histograms still read.
    body = metrics_text({TPOT: [0.02]}, 1.0) + 'x{a="1" 1\n'
    counters, scrape = scrape_window("http://s", _Session(_Response(body)))
    assert counters is None and scrape.histograms[TPOT].count == 1


def _delta(edges: list[float], per_bucket: list[float], total: float) -> HistogramDelta:
    return HistogramDelta(tuple(edges), tuple(per_bucket), total)


def test_quantiles_interpolate_inside_their_bucket() -> None:
    # 4 observations in (10, 25] ms, 1 in (25, 50] ms.
    delta = _delta([0.01, 0.025, 0.05], [0, 4, 1, 0], 0.1)
    p50 = delta.quantile(0.5)
    assert p50 is not None
    assert p50.value == pytest.approx(0.01 + 0.015 * (2.5 / 4))
    assert (p50.bucket_low, p50.bucket_high) == (0.01, 0.025)
    p90 = delta.quantile(0.9)
    assert p90 is not None and (p90.bucket_low, p90.bucket_high) == (0.025, 0.05)
    assert p90.value == pytest.approx(0.025 + 0.025 * (4.5 - 4) / 1)
    assert delta.mean() == pytest.approx(0.02)
    # In the first bucket the lower edge is 0; in the +Inf bucket the value is its lower edge.
    low = _delta([0.01, 0.025], [2, 0, 0], 0.01).quantile(0.5)
    assert low is not None and low.bucket_low == 0.0 and low.value == pytest.approx(0.005)
    top = _delta([0.01, 0.025], [0, 0, 3], 9.0).quantile(0.5)
    assert top is not None and top.bucket_high is None and top.value == 0.025
    assert _delta([0.01], [0, 0], 0.0).quantile(0.5) is None


def test_the_window_is_after_minus_before_and_a_restart_is_refused() -> None:
    before = Histogram(edges=[0.01, 0.025], cumulative=[1, 3], sum=0.05, count=4)
    after = Histogram(edges=[0.01, 0.025], cumulative=[1, 7], sum=0.15, count=9)
    delta = histogram_delta(before, after)
    assert delta.counts == (0, 4, 1) and delta.total == pytest.approx(0.1)
    with pytest.raises(ValueError, match="restart"):
        histogram_delta(after, before)
    moved = Histogram(edges=[0.01, 0.05], cumulative=[1, 7], sum=0.15, count=9)
    with pytest.raises(ValueError, match="edges"):
        histogram_delta(before, moved)
    scrape = ServerScrape(histograms={TPOT: after})
    assert "not scraped" in str(window_delta(None, scrape))
    assert "could not be read" in str(window_delta(ServerScrape(error="boom"), scrape))
    assert "restart" in str(window_delta(scrape, ServerScrape(histograms={TPOT: before})))
    assert "no latency histograms" in str(window_delta(ServerScrape(), ServerScrape()))


def test_the_interval_is_unpaired_and_absent_without_an_upper_edge(
    metrics_text: Any,
) -> None:
    from loadtest.server_latency import _mean_interval

    base = _delta([0.01, 0.025, 0.05], [0, 40, 10, 0], 40 * 0.02 + 10 * 0.03)
    sd = _delta([0.01, 0.025, 0.05], [30, 20, 0, 0], 30 * 0.008 + 20 * 0.012)
    interval = _mean_interval(base, sd, 0.95)
    assert interval.estimate == pytest.approx(0.022 / 0.0096)
    assert interval.low is not None and interval.high is not None
    assert interval.low < interval.estimate < interval.high
    # Four times the observations, same shape: about half as wide (1/sqrt(n)).
    base4 = _delta(list(base.edges), [4 * c for c in base.counts], 4 * base.total)
    sd4 = _delta(list(sd.edges), [4 * c for c in sd.counts], 4 * sd.total)
    narrower = _mean_interval(base4, sd4, 0.95)
    assert narrower.low is not None and narrower.high is not None
    ratio = math.log(narrower.high / narrower.low) / math.log(interval.high / interval.low)
    assert ratio == pytest.approx(0.5, abs=0.02)
    stalled = _delta(list(sd.edges), [30, 19, 0, 1], sd.total + 9.0)
    assert _mean_interval(base, stalled, 0.95).low is None


def _records(classes: list[str]) -> list[RequestRecord]:
    return [
        RequestRecord(arm="baseline", index=i, prompt_id=f"p{i}", prompt_class=c)
        for i, c in enumerate(classes)
    ]


def _scrape(metrics_text: Any, values: list[float], tokens: float) -> ServerScrape:
    return parse_histograms(metrics_text({TPOT: values, TTFT: [0.05] * len(values)}, tokens))


def test_a_class_has_its_own_figure_only_from_blocks_of_that_class_alone(
    metrics_text: Any,
) -> None:
    zero = _scrape(metrics_text, [], 0.0)
    # Block 0: indices 0-1 structured; block 1: 2-3 open_ended; block 2: 4-5 mixed.
    records = _records(["s", "s", "o", "o", "s", "o"])
    blocks = [
        ScrapeWindow(zero, _scrape(metrics_text, [0.02, 0.02], 20.0), 0, 1),
        ScrapeWindow(zero, _scrape(metrics_text, [0.04, 0.04], 20.0), 2, 3),
        ScrapeWindow(zero, _scrape(metrics_text, [0.02, 0.04], 20.0), 4, 5),
    ]
    latency, deltas = arm_server_latency(blocks, records)
    assert latency.available and latency.scrapes == 6 and latency.failed_scrapes == 0
    assert latency.overall is not None and latency.overall.tpot_ms is not None
    assert latency.overall.tpot_ms.count == 6 and latency.overall.windows == 3
    assert latency.overall.tpot_ms.mean == pytest.approx(30.0)
    assert set(latency.by_class) == {"s", "o"}
    means = {name: block.tpot_ms and block.tpot_ms.mean for name, block in latency.by_class.items()}
    assert means == {"s": pytest.approx(20.0), "o": pytest.approx(40.0)}
    assert latency.by_class["s"].windows == 1
    assert latency.overall.decode_tokens == 60 - 6
    assert deltas.overall is not None and set(deltas.by_class) == {"s", "o"}
    # One window for the whole arm never stands for a class.
    one, _ = arm_server_latency([ScrapeWindow(zero, _scrape(metrics_text, [0.02], 5.0))], records)
    assert one.available and one.by_class == {} and "o, s" in (one.class_note or "")
    # A block without its second scrape: the arm has no server figure, and says why.
    broken, none = arm_server_latency([blocks[0], ScrapeWindow(zero, None, 2, 3)], records)
    assert not broken.available and "1 of 2 windows" in (broken.reason or "")
    assert none.overall is None


def _burst_pairs(run_dir: Path, arm: str) -> None:
    """Every second chunk of ``arm`` arrives together with the one before (gap 0)."""
    path = run_dir / f"records_{arm}.jsonl"
    records = read_records(path)
    for record in records:
        record.chunk_times = [record.chunk_times[i - i % 2] for i in range(len(record.chunk_times))]
    write_records(path, records)


@pytest.fixture
def histogram_run_dir(
    fake_run_dir: Path, add_server_histograms: Any, fake_server_observations: Any
) -> Path:
    for arm in ("baseline", "speculative"):
        add_server_histograms(fake_run_dir, arm, *fake_server_observations(arm))
    return fake_run_dir


def test_a_smooth_run_keeps_the_client_stream_and_both_sources_agree(
    histogram_run_dir: Path,
) -> None:
    summary = summarize(histogram_run_dir)
    assert summary.per_token_source is LatencySource.CLIENT_STREAM
    assert summary.per_token_source_reason is None
    for arm in ("baseline", "speculative"):
        client = summary.arm(arm).overall
        server = summary.arm(arm).server_latency
        assert server is not None and server.available and server.overall is not None
        tpot = server.overall.tpot_ms
        assert tpot is not None and tpot.mean == pytest.approx(client.tpot_ms.mean)
        # Per token after the first: the step gaps' sum over 15 decode tokens per request. The
        # client's per-token ITL counts tokens after the first chunk, which is the same where
        # the first chunk carries one token (the baseline; vLLM's prefill step), not where
        # this fake SD arm puts four into it.
        assert server.overall.itl_ms_mean == pytest.approx(client.tpot_ms.mean)
        if arm == "baseline":
            assert server.overall.itl_ms_mean == pytest.approx(client.itl_ms.mean)
    client_speedup = summary.speedup_of("tpot_ms")
    assert summary.server_speedup is not None
    server_speedup = summary.server_speedup.overall["tpot_ms"]["mean"]
    assert server_speedup.estimate == pytest.approx(client_speedup)
    numbers = headline(summary)
    assert numbers.speedup_source == "client stream" and numbers.speedup_note is None
    assert numbers.speedup_tpot_mean == pytest.approx(client_speedup)
    saved = json.loads((histogram_run_dir / "summary.json").read_text())
    assert saved["per_token_source"] == "client stream"


def test_a_bursting_baseline_takes_the_per_token_speedups_from_the_servers(
    histogram_run_dir: Path,
) -> None:
    _burst_pairs(histogram_run_dir, "baseline")
    summary = summarize(histogram_run_dir)
    assert summary.per_token_source is LatencySource.SERVER_HISTOGRAMS
    assert "baseline" in (summary.per_token_source_reason or "")
    server = summary.server_speedup
    assert server is not None
    # Baseline 20 ms per token, SD 8 ms (the servers' own histograms).
    assert server.overall["tpot_ms"]["mean"].estimate == pytest.approx(2.5)
    numbers = headline(summary)
    assert numbers.speedup_tpot_mean == pytest.approx(2.5)
    assert numbers.speedup_ttft_mean == pytest.approx(1.0)  # same TTFT on both servers
    assert numbers.speedup_source == "server histograms"
    text = headline_text(numbers)
    assert "TPOT mean 2.50x (TTFT and TPOT from the server histograms)" in text
    assert numbers.speedup_note and "server histograms" in numbers.speedup_note
    saved = json.loads((histogram_run_dir / "summary.json").read_text())
    assert saved["per_token_source"] == "server histograms"
    report = render_markdown(RunSummary.model_validate(saved), [])
    assert "Per-token latency: client stream and server histograms" in report
    assert "| all | TPOT mean (ms) | server histograms * | 20.00 | 8.00 | 2.500x [" in report


def test_a_bursting_run_without_server_histograms_still_leaves_them_out(
    histogram_run_dir: Path,
) -> None:
    _burst_pairs(histogram_run_dir, "baseline")
    window = json.loads((histogram_run_dir / "window_speculative.json").read_text())
    window["histograms_after"] = ServerScrape(error="ConnectionError: refused").model_dump()
    (histogram_run_dir / "window_speculative.json").write_text(json.dumps(window))
    summary = summarize(histogram_run_dir)
    assert summary.per_token_source is LatencySource.CLIENT_STREAM
    assert summary.server_speedup is None
    assert any("1 of 2 /metrics scrapes could not be read" in w for w in summary.warnings)
    numbers = headline(summary)
    assert numbers.speedup_tpot_mean is None and numbers.speedup_ttft_mean is None
    assert "left out" in (numbers.speedup_note or "")


def test_the_verdict_names_its_acceptance_source(fake_run_dir: Path) -> None:
    from experiment import build_config
    from loadtest.analysis import analysis_info

    run_file = fake_run_dir / "run.json"
    run = json.loads(run_file.read_text())
    run["analysis"] = analysis_info(build_config({})).model_dump(mode="json")
    run_file.write_text(json.dumps(run))
    summary = summarize(fake_run_dir)
    header, rows = verdict_rows(summary)
    assert "acceptance (source)" in header
    column = header.index("acceptance (source)")
    cells = {row[0]: row[column] for row in rows}
    # The fake SD server's counters: 120 accepted of 280 drafted.
    assert cells["all"] == f"{120 / 280:.3f} (server counters)"
    assert len(cells) > 1
    assert all(cell.endswith("(client estimate)") for name, cell in cells.items() if name != "all")
    # A server without counters (the V0 fork): every row is the client estimate.
    window_file = fake_run_dir / "window_speculative.json"
    window = json.loads(window_file.read_text())
    window["metrics_before"] = window["metrics_after"] = {}
    window_file.write_text(json.dumps(window))
    header, rows = verdict_rows(summarize(fake_run_dir))
    assert all(row[column].endswith("(client estimate)") for row in rows)


def test_no_corruption_of_a_body_makes_the_parser_raise(metrics_text: Any) -> None:
    import random
    import string

    body = metrics_text({TPOT: [0.02, 0.03], ITL: [0.02] * 4}, 6.0)
    rng = random.Random(40)
    damaged = 0
    for _ in range(300):
        chars = list(body)
        for _ in range(rng.randint(1, 8)):
            chars.insert(rng.randrange(len(chars) + 1), rng.choice(string.printable + '{}"=#'))
        scrape = parse_histograms("".join(chars))
        damaged += scrape.malformed_lines > 0 or len(scrape.histograms) < 3
        for histogram in scrape.histograms.values():
            assert histogram.cumulative == sorted(histogram.cumulative)
            assert not histogram.cumulative or histogram.cumulative[-1] <= histogram.count
    assert damaged > 0  # the corruption did reach the histograms' lines
