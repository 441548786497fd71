"""The traffic importer: every unusable line counted by reason with its number, every usable
one kept, redaction before anything is written, the file private, the profile without text."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from experiment import build_config
from loadtest.__main__ import main
from loadtest.traffic import (
    REDACTED,
    ImportSettings,
    Reason,
    approximate_tokens,
    bucket_label,
    bucket_labels,
    bursts,
    import_lines,
    over_long,
    per_second,
    profile,
    read_traffic,
    write_traffic,
)

SETTINGS = ImportSettings(
    allowed_classes=["structured", "open_ended"],
    max_model_len=200,
    length_buckets=[16, 64],
    class_field="headers.x-prompt-class",
)


def _line(**fields: object) -> str:
    base: dict[str, object] = {
        "timestamp": 1000.0,
        "headers": {"x-prompt-class": "structured"},
        "messages": [{"role": "user", "content": "count to ten"}],
        "usage": {"completion_tokens": 10},
    }
    base.update(fields)
    return json.dumps({k: v for k, v in base.items() if v is not None})


# (line text, the reason it is rejected): one of each, in this order, in the test log.
BAD = [
    ("", Reason.BLANK),
    ("{not json", Reason.BAD_JSON),
    ("[1, 2]", Reason.NOT_OBJECT),
    (json.dumps({"timestamp": 1, "usage": {"completion_tokens": 3}}), Reason.MISSING_MESSAGES),
    (_line(messages=[]), Reason.EMPTY_MESSAGES),
    (_line(messages=[{"role": "user"}]), Reason.BAD_MESSAGE),
    (_line(messages=[{"role": "wizard", "content": "x"}]), Reason.BAD_ROLE),
    (
        _line(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]),
        Reason.UNSUPPORTED_CONTENT,
    ),
    (_line(usage=None), Reason.MISSING_LENGTH),
    (_line(usage={"completion_tokens": "many"}), Reason.NON_NUMERIC_LENGTH),
    (_line(usage={"completion_tokens": 2.5}), Reason.NON_NUMERIC_LENGTH),
    (_line(usage={"completion_tokens": -4}), Reason.NON_POSITIVE_LENGTH),
    (_line(usage={"completion_tokens": 0}), Reason.NON_POSITIVE_LENGTH),
    (_line(timestamp=None), Reason.MISSING_TIMESTAMP),
    (_line(timestamp="yesterday"), Reason.BAD_TIMESTAMP),
    (_line(timestamp=-5), Reason.BAD_TIMESTAMP),
    (_line(headers={}), Reason.MISSING_CLASS),
    (_line(headers={"x-prompt-class": "poetry"}), Reason.UNKNOWN_CLASS),
    (_line(id=[1]), Reason.BAD_ID),
    (_line(id="long-1", usage={"completion_tokens": 195}), Reason.OVER_LONG),
]
GOOD = [
    _line(id="g1", timestamp="1970-01-01T00:16:40+00:00"),  # 1000 s
    _line(
        id="g2",
        timestamp=1002.5,
        headers={"X-Prompt-Class": "open_ended"},  # header names in any case
        messages=[
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "a story"}]},
            {"role": "assistant", "content": "Once."},
            {"role": "user", "content": "longer " * 30},
        ],
        usage=None,
        max_tokens=40,
    ),
    json.dumps(
        {
            "request_id": 7,
            "timestamp": "1970-01-01T00:16:41",  # no zone: UTC
            "headers": {"x-prompt-class": "structured"},
            "request": {"messages": [{"role": "user", "content": "json please"}]},
            "response": {"usage": {"completion_tokens": 12}},
        }
    ),
]


def test_every_unusable_line_is_counted_by_reason_with_its_number_and_no_usable_one_is_lost():
    lines = [text for text, _ in BAD[:10]] + GOOD[:2] + [text for text, _ in BAD[10:]] + GOOD[2:]
    lines.append(_line(id="g1", timestamp=1003))  # a duplicate of the first good id
    result = import_lines(lines, SETTINGS)
    expected = {
        number: reason
        for number, reason in zip(
            [*range(1, 11), *range(13, 13 + len(BAD) - 10)], [r for _, r in BAD], strict=True
        )
    }
    expected[len(lines)] = Reason.DUPLICATE_ID
    assert {r.line: r.reason for r in result.rejected} == expected
    assert result.lines == len(lines) == len(result.rejected) + len(result.requests)
    assert [r.id for r in result.requests] == ["g1", "7", "g2"]  # in arrival order
    assert [r.offset_s for r in result.requests] == [0.0, 1.0, 2.5]
    assert [r.output_tokens for r in result.requests] == [10, 12, 40]
    assert [r.prompt_class for r in result.requests] == ["structured", "structured", "open_ended"]
    g2 = result.requests[2]
    assert [m.role for m in g2.messages] == ["system", "user", "assistant", "user"]
    assert g2.messages[1].content == "a story"
    assert g2.input_tokens >= 64 and result.requests[0].input_tokens < 16
    over = [r for r in result.rejected if r.reason is Reason.OVER_LONG]
    assert over[0].request_id == "long-1" and "max_model_len 200" in over[0].detail


def test_the_over_long_check_names_the_requests_and_follows_max_model_len():
    text = _line(id="big", usage={"completion_tokens": 100})
    fits = import_lines([text], SETTINGS)
    assert [r.id for r in fits.requests] == ["big"]
    small = ImportSettings(**{**vars(SETTINGS), "max_model_len": 100})
    refused = import_lines([text], small)
    assert not refused.requests and refused.rejected[0].request_id == "big"
    assert over_long(fits.requests, 100) == ["big"] and over_long(fits.requests, 200) == []


def test_redaction_happens_before_hashing_and_writing(tmp_path: Path):
    secret = _line(id="s", messages=[{"role": "user", "content": "mail bob@example.com now"}])
    settings = ImportSettings(**{**vars(SETTINGS), "redact": [r"\S+@\S+"]})
    result = import_lines([secret], settings)
    assert result.requests[0].messages[0].content == f"mail {REDACTED} now"
    path = write_traffic(result.requests, tmp_path / "t" / "traffic.jsonl")
    assert "bob@" not in path.read_text()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    plain = import_lines([secret], SETTINGS).requests[0]
    assert plain.sha256 != result.requests[0].sha256  # the hash is of what is written
    assert read_traffic(path) == result.requests


def test_an_existing_traffic_file_is_made_private_too(tmp_path: Path):
    path = tmp_path / "traffic.jsonl"
    path.write_text("")
    path.chmod(0o644)
    write_traffic(import_lines([_line(id="x")], SETTINGS).requests, path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_read_traffic_names_the_line_and_field(tmp_path: Path):
    path = tmp_path / "traffic.jsonl"
    good = import_lines([_line(id="x")], SETTINGS).requests[0].model_dump_json(by_alias=True)
    bad = json.loads(good) | {"output_tokens": 0}
    path.write_text(good + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(ValueError, match=r"traffic.jsonl:2: output_tokens"):
        read_traffic(path)
    with pytest.raises(ValueError, match="does not exist"):
        read_traffic(tmp_path / "none.jsonl")


def test_the_profile_shows_ids_and_hashes_never_the_prompts():
    lines = [_line(id=f"r{i}", timestamp=1000 + (0 if i < 5 else i)) for i in range(12)]
    lines.append(_line(id="private", messages=[{"role": "user", "content": "TOP SECRET"}]))
    lines.append("{broken")
    result = import_lines(lines, SETTINGS)
    text = profile(result, approximate=True, length_buckets=[16, 64])
    assert "TOP SECRET" not in text and "count to ten" not in text
    assert "not JSON: 1 (lines 14)" in text
    assert "structured: 13" in text and "approximated" in text
    assert result.requests[0].sha256[:16] in text
    counts = per_second(result.requests)
    assert counts[0] == 6 and sum(counts) == 13  # r0-r4 and "private" in the first second
    assert bursts(counts) == [0]


def test_the_profile_buckets_by_the_edges_it_is_given_and_the_file_holds_no_bucket(
    tmp_path: Path,
):
    short = _line(id="s", messages=[{"role": "user", "content": "hi"}])
    long = _line(id="l", messages=[{"role": "user", "content": "x" * 400}])
    result = import_lines([short, long], SETTINGS)
    assert "structured 0-15: 1 requests" in profile(result, approximate=True, length_buckets=[16])
    assert "structured 16+: 1 requests" in profile(result, approximate=True, length_buckets=[16])
    assert "structured 0-999: 2 requests" in profile(
        result, approximate=True, length_buckets=[1000]
    )
    path = write_traffic(result.requests, tmp_path / "traffic.jsonl")
    assert "input_bucket" not in path.read_text()  # bucketed when the report is built
    # A file of the first importer (a bucket label per request) still reads.
    older = [json.loads(line) | {"input_bucket": "0-511"} for line in path.read_text().splitlines()]
    path.write_text("".join(json.dumps(entry) + "\n" for entry in older))
    assert read_traffic(path) == result.requests


def test_buckets_and_the_approximation():
    assert [bucket_label(n, [16, 64]) for n in (0, 15, 16, 63, 64, 10_000)] == [
        "0-15", "0-15", "16-63", "16-63", "64+", "64+",
    ]  # fmt: skip
    assert bucket_labels([16, 64]) == ["0-15", "16-63", "64+"]
    assert bucket_labels([]) == ["0+"]
    # 12 bytes -> 3 tokens, + 4 for the message, + 3 for the reply's start
    assert approximate_tokens([{"role": "user", "content": "count to ten"}]) == 10


def test_bucket_edges_must_increase():
    with pytest.raises(ValueError, match="strictly increasing"):
        build_config({"loadtest.traffic.length_buckets": "[512, 512]"})
    with pytest.raises(ValueError, match="strictly increasing"):
        build_config({"local.traffic_length_buckets": "[200, 100]"})


def test_the_command_writes_the_file_and_refuses_a_log_with_nothing_usable(tmp_path, capsys):
    log = tmp_path / "log.jsonl"
    log.write_text("\n".join([*GOOD, "{bad"]) + "\n")
    out = tmp_path / "traffic.jsonl"
    assert main(["traffic", "import", str(log), "--out", str(out), "--redact", "story"]) == 0
    printed = capsys.readouterr().out
    assert "3 requests from 4 lines; 1 lines not usable" in printed and "story" not in printed
    assert [r.id for r in read_traffic(out)] == ["g1", "7", "g2"]
    assert "story" not in out.read_text()
    log.write_text("{bad\n")
    assert main(["traffic", "import", str(log), "--out", str(tmp_path / "none.jsonl")]) == 2
    assert not (tmp_path / "none.jsonl").exists()
    assert main(["traffic", "import", str(log), "--out", str(out), "--redact", "("]) == 2
    # --local: local.max_model_len and local.traffic_length_buckets
    log.write_text(_line(id="l", usage={"completion_tokens": 600}) + "\n")
    assert main(["traffic", "import", str(log), "--out", str(out), "--local"]) == 2
    assert "max_model_len 512" in capsys.readouterr().out


def test_the_trace_schedule_keeps_offsets_scaled_messages_and_lengths():
    from loadtest.client import RequestParams, build_payload
    from loadtest.prompts import traffic_schedule

    requests = import_lines(GOOD, SETTINGS).requests
    schedule = traffic_schedule(requests, time_scale=0.5, warmup_requests=1, max_requests=2)
    warmup, measured = schedule[0], schedule[1:]
    assert warmup.warmup and warmup.prompt.id == "g1"
    slots = [(i.index, i.prompt.id, i.arrival_s) for i in measured]
    assert slots == [(0, "g1", 0.0), (1, "7", 0.5)]
    assert [i.prompt.max_tokens for i in measured] == [10, 12]
    params = RequestParams(model="m", max_tokens=600, class_header="x-prompt-class")
    g2 = traffic_schedule(requests)[2].prompt
    payload = build_payload(g2.text, params, g2.messages, g2.max_tokens)
    assert payload["messages"] == [m.model_dump() for m in requests[2].messages]
    assert payload["max_tokens"] == 40 and payload["ignore_eos"] is True
    with pytest.raises(ValueError, match="chat completions"):
        build_payload("", RequestParams(model="m", max_tokens=1, api="completions"), g2.messages)
    with pytest.raises(ValueError, match="time scale"):
        traffic_schedule(requests, time_scale=0)


class _Body:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def iter_chunks(self, size: int):
        for start in range(0, len(self.data), size):
            yield self.data[start : start + size]


class _S3:
    """A stub S3 client holding objects by (bucket, key)."""

    def __init__(self, objects: dict[tuple[str, str], bytes]) -> None:
        self.objects = objects

    def get_object(self, Bucket: str, Key: str) -> dict:
        from botocore.exceptions import ClientError

        if (Bucket, Key) not in self.objects:
            raise ClientError({"Error": {"Code": "NoSuchKey", "Message": "no"}}, "GetObject")
        return {"Body": _Body(self.objects[(Bucket, Key)])}


def test_the_cluster_run_replays_a_private_copy_of_the_bucket_object(
    tmp_path: Path, caplog, monkeypatch
):
    import logging

    from loadtest.__main__ import _traffic_from_bucket
    from loadtest.traffic import TRAFFIC_COPY, fetch_traffic

    secret = _line(id="s", messages=[{"role": "user", "content": "PROMPT TEXT"}])
    requests = import_lines([secret], SETTINGS).requests
    data = "".join(r.model_dump_json(by_alias=True) + "\n" for r in requests).encode()
    config = build_config({"loadtest.traffic.file": "runs/pilot/traffic.jsonl"})
    key = config.loadtest.traffic.bucket_key()
    assert key == "loadtest-traffic/traffic.jsonl"
    s3 = _S3({("bucket", key): data})
    caplog.set_level(logging.DEBUG)
    copy = fetch_traffic("bucket", key, tmp_path / "run" / TRAFFIC_COPY, region="r", client=s3)
    assert read_traffic(copy) == requests and stat.S_IMODE(copy.stat().st_mode) == 0o600
    assert "PROMPT TEXT" not in caplog.text and key in caplog.text  # named, never shown
    with pytest.raises(ValueError, match=r"s3://bucket/loadtest-traffic/other.jsonl.*upload"):
        fetch_traffic(
            "bucket", "loadtest-traffic/other.jsonl", tmp_path / "x", region="r", client=s3
        )
    assert not (tmp_path / "x").exists()
    # The run command: the config then names the copy in the run directory.
    import loadtest.traffic

    monkeypatch.setattr(
        loadtest.traffic, "fetch_traffic", lambda *a, **k: fetch_traffic(*a, **k, client=s3)
    )
    replay = _traffic_from_bucket(config, "bucket", tmp_path / "run2")
    assert replay.loadtest.traffic.file == str((tmp_path / "run2" / TRAFFIC_COPY).resolve())
