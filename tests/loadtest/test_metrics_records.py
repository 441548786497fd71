"""Reading the records file the metrics are computed from: exact round trip, forward
compatible, and a clear error for a line that is not a record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadtest.records import RequestRecord, read_records, write_records


def _record(index: int) -> RequestRecord:
    return RequestRecord(
        arm="speculative",
        index=index,
        prompt_id=f"p{index}",
        prompt_class="structured",
        warmup=index == 0,
        max_tokens=5,
        wall_start=1_700_000_000.123456789,
        start=0.1 + index / 3,
        scheduled_lag_s=1e-7,
        ttft_s=0.030000000000000002,
        e2e_s=0.1 * 3,
        chunk_times=[0.001, 0.030000000000000002, 0.1 * 3],
        chunk_tokens=[0, 2, 3],
        chunk_texts=["", "é ", '"quoted"\n'],
        output_tokens=5,
        prompt_tokens=None,
        token_accounting="chunks",
        finish_reason="length",
        http_status=200,
        error="timeout" if index == 2 else None,
        error_detail="read timed out" if index == 2 else None,
    )


def test_records_round_trip_exactly(tmp_path: Path) -> None:
    records = [_record(i) for i in range(3)]
    path = tmp_path / "records.jsonl"
    write_records(path, records)
    assert read_records(path) == records


def test_unknown_fields_and_blank_lines_are_ignored(tmp_path: Path) -> None:
    line = json.loads(_record(1).to_json())
    path = tmp_path / "records.jsonl"
    path.write_text(json.dumps({**line, "from_a_newer_version": [1, 2]}) + "\n\n")
    assert read_records(path) == [_record(1)]


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ('{"arm": "baseline", "index": 3', "EOF while parsing"),
        ('{"arm": "baseline", "index": 3, "prompt_class": "c"}', "prompt_id: Field required"),
        (
            '{"arm": "b", "index": 3, "prompt_id": "p", "prompt_class": "c", "chunk_tokens": "x"}',
            "chunk_tokens: Input should be a valid array",
        ),
    ],
)
def test_a_line_that_is_not_a_record_is_named(tmp_path: Path, line: str, problem: str) -> None:
    path = tmp_path / "records.jsonl"
    path.write_text(_record(1).to_json() + "\n" + line + "\n")
    with pytest.raises(
        ValueError, match=rf"records\.jsonl:2 is not a request record \(.*{problem}"
    ):
        read_records(path)
