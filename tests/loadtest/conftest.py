"""Shared fixtures: scripted servers (ground truth) on ephemeral loopback ports, a fake run
directory, and the check that every summary.json a test writes matches the published schema."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from bench.scripted_server import ScriptedServer
from loadtest.client import RequestParams
from loadtest.records import RequestRecord
from loadtest.transport import StreamSession

SUMMARY_SCHEMA = Path(__file__).resolve().parents[2] / "docs" / "schemas" / "summary.schema.json"


def _summary_schema_errors(summary: dict[str, Any]) -> list[str]:
    """What is wrong with ``summary`` according to docs/schemas/summary.schema.json."""
    schema = json.loads(SUMMARY_SCHEMA.read_text())
    validator = jsonschema.Draft202012Validator(schema)
    return [
        f"{'/'.join(map(str, error.absolute_path))}: {error.message}"
        for error in validator.iter_errors(summary)
    ]


@pytest.fixture
def summary_schema_errors() -> Callable[[dict[str, Any]], list[str]]:
    return _summary_schema_errors


@pytest.fixture(autouse=True)
def summaries_match_the_published_schema(tmp_path: Path) -> Iterator[None]:
    """After each test: every summary.json under its tmp_path validates against the schema."""
    yield
    for path in sorted(tmp_path.rglob("summary.json")):
        errors = _summary_schema_errors(json.loads(path.read_text()))
        assert not errors, f"{path} does not match {SUMMARY_SCHEMA.name}: {errors[:5]}"


@pytest.fixture
def session() -> Iterator[StreamSession]:
    with StreamSession() as s:
        yield s


@pytest.fixture
def params() -> RequestParams:
    return RequestParams(model="test-model", max_tokens=16, timeout_s=2.0)


@pytest.fixture
def new_record():
    def make(index: int = 0) -> RequestRecord:
        return RequestRecord(arm="baseline", index=index, prompt_id="p", prompt_class="c")

    return make


@pytest.fixture
def serve() -> Iterator:
    servers: list[ScriptedServer] = []

    def start(scripts, **kwargs) -> ScriptedServer:
        server = ScriptedServer(scripts, **kwargs).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def _record(
    arm: str,
    index: int,
    cls: str,
    *,
    ttft: float,
    gap: float,
    tokens_per_chunk: int,
    total: int,
    start: float,
    error: str | None = None,
) -> RequestRecord:
    chunks = [tokens_per_chunk] * (total // tokens_per_chunk)
    times = [ttft + i * gap for i in range(len(chunks))]
    return RequestRecord(
        arm=arm,
        index=index,
        prompt_id=f"{cls}-{index % 3}",
        prompt_class=cls,
        max_tokens=total,
        start=start,
        ttft_s=None if error else ttft,
        e2e_s=times[-1] if not error else 0.01,
        chunk_times=[] if error else times,
        chunk_tokens=[] if error else chunks,
        chunk_texts=[] if error else [f" w{i}" for i in range(len(chunks))],
        output_tokens=None if error else total,
        error=error,
        error_detail="scripted" if error else None,
    )


@pytest.fixture
def fake_run_dir(tmp_path, write_run_json):
    """A run directory as the runner writes it, with known records (no servers needed)."""
    import json

    from loadtest.records import write_records

    write_run_json(
        tmp_path,
        variant_labels={"baseline": "Base", "speculative": "SD"},
        prompt_files=[],
        analysis=None,
    )
    for arm, tpc, gap in (("baseline", 1, 0.02), ("speculative", 4, 0.04)):
        records = [
            _record(
                arm,
                i,
                "structured" if i % 2 else "open_ended",
                ttft=0.05 + 0.001 * i,
                gap=gap,
                tokens_per_chunk=tpc,
                total=16,
                start=i * 0.5,
            )
            for i in range(10)
        ]
        records.append(
            _record(
                arm,
                10,
                "structured",
                ttft=0,
                gap=0,
                tokens_per_chunk=1,
                total=1,
                start=5.0,
                error="http_5xx",
            )
        )
        records.append(
            _record(
                arm,
                11,
                "open_ended",
                ttft=0,
                gap=0,
                tokens_per_chunk=1,
                total=1,
                start=5.5,
                error="disconnected_mid_stream",
            )
        )
        write_records(tmp_path / f"records_{arm}.jsonl", records)
        before = after = {}
        if arm == "speculative":
            before = {
                "num_drafts": 0.0,
                "num_draft_tokens": 0.0,
                "num_accepted_tokens": 0.0,
                "num_accepted_tokens_per_pos": {"0": 0.0, "1": 0.0, "2": 0.0},
            }
            after = {
                "num_drafts": 40.0,
                "num_draft_tokens": 280.0,
                "num_accepted_tokens": 120.0,
                "num_accepted_tokens_per_pos": {"0": 40.0, "1": 40.0, "2": 40.0},
            }
        (tmp_path / f"window_{arm}.json").write_text(
            json.dumps(
                {
                    "arm": arm,
                    "stopped_by": "schedule_done",
                    "unfinished_requests": 0,
                    "not_started_requests": 0,
                    "metrics_before": before,
                    "metrics_after": after,
                }
            )
        )
    return tmp_path
