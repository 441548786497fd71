"""The raw per-request record: what one streamed request looked like on the wire.

Every metric of the report is computed from these records (never from Locust's
bucketed stats), and the records are kept as JSONL so a report can be rebuilt.
Times are seconds on the client's monotonic clock (``time.perf_counter``);
``chunk_times`` are offsets from ``start``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cache
from pathlib import Path

from pydantic import TypeAdapter, ValidationError


class FailureReason(StrEnum):
    """Why a request failed; the report counts failures by these reasons."""

    HTTP_4XX = "http_4xx"
    HTTP_5XX = "http_5xx"
    CONNECTION_REFUSED = "connection_refused"
    CONNECTION_ERROR = "connection_error"
    DISCONNECTED = "disconnected_mid_stream"
    MALFORMED_SSE = "malformed_sse"
    TRUNCATED_STREAM = "truncated_stream"
    TIMEOUT = "timeout"
    SERVER_ERROR_EVENT = "server_error_event"
    NO_OUTPUT = "no_output"


@dataclass
class RequestRecord:
    arm: str
    index: int  # position in the shared schedule (same for both arms)
    prompt_id: str
    prompt_class: str
    warmup: bool = False
    # A replayed request's input tokens as imported (loadtest.traffic): the report buckets
    # it by the edges in force when it is built. None: a prompt-suite request.
    input_tokens: int | None = None
    max_tokens: int = 0
    wall_start: float = 0.0  # time.time() at start, for humans and CloudWatch timestamps
    start: float = 0.0  # perf_counter at request start
    scheduled_lag_s: float = 0.0  # open loop: how late the request left vs its arrival time
    ttft_s: float | None = None  # start -> first chunk carrying generated content
    e2e_s: float | None = None  # start -> end of stream
    chunk_times: list[float] = field(default_factory=list)  # content chunks, offsets from start
    chunk_tokens: list[int] = field(default_factory=list)  # tokens each content chunk carried
    chunk_texts: list[str] = field(default_factory=list)
    output_tokens: int | None = None  # final usage.completion_tokens
    prompt_tokens: int | None = None
    token_accounting: str = "usage"  # "usage" (exact) or "chunks" (server sent no usage)
    finish_reason: str | None = None
    http_status: int | None = None
    error: str | None = None  # a FailureReason value
    error_detail: str | None = None
    # The server's own acceptance of this request, from the final usage chunk's
    # metrics.speculative_decoding (vLLM --per-request-spec-decode-metrics; field names in
    # guardrails/vllm_metrics.py). None: the response carried none (no flag, no drafter, a
    # stream cut before its last chunk, or a record from before these fields).
    spec_steps: int | None = None  # verify steps (num_spec_steps)
    spec_draft_tokens: int | None = None  # drafted tokens (num_draft_tokens)
    spec_accepted_tokens: int | None = None  # accepted drafted tokens (num_accepted_draft_tokens)
    spec_histogram: list[int] | None = None  # steps that accepted exactly j drafts, j = 0..k

    @property
    def has_spec_figures(self) -> bool:
        """The response carried the server's per-request acceptance."""
        return self.spec_steps is not None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def text(self) -> str:
        return "".join(self.chunk_texts)

    def to_json(self) -> str:
        # Every field is a scalar, a list of scalars or None, so vars() is what asdict() returns,
        # at a tenth of the CPU (asdict deep-copies each list; this runs once per request).
        return json.dumps(vars(self), separators=(",", ":"))


@cache
def _record_adapter() -> TypeAdapter[RequestRecord]:
    # pydantic-core parses a JSONL line and builds the record in one pass, several times
    # faster than json.loads + the constructor (reading is a large part of summarizing a big
    # run: docs/costs-and-statistics.md). Unknown keys (a newer version's) are ignored:
    # pydantic's default for stdlib dataclasses, https://docs.pydantic.dev/latest/api/type_adapter/
    return TypeAdapter(RequestRecord)


def write_records(path: Path, records: Iterable[RequestRecord]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as out:
        for record in records:
            out.write(record.to_json() + "\n")


def read_records(path: Path) -> list[RequestRecord]:
    return list(iter_records(path))


def iter_records(path: Path) -> Iterator[RequestRecord]:
    adapter = _record_adapter()
    with path.open("rb") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                yield adapter.validate_json(line)
            except ValidationError as err:
                problem = err.errors()[0]
                where = ".".join(map(str, problem["loc"]))
                raise ValueError(
                    f"{path}:{number} is not a request record ({where + ': ' if where else ''}"
                    f"{problem['msg']}); the records file is written by the load test, do not "
                    "edit it by hand"
                ) from None
