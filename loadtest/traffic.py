"""Your own traffic: import OpenAI-compatible chat-completions request logs into a traffic file
the load test replays (``loadtest.traffic.file``), and profile it.

A log is JSONL, one request per line::

    {"id": "r1", "timestamp": "2026-11-27T10:00:00.250Z", "headers": {"x-prompt-class":
     "structured"}, "messages": [{"role": "user", "content": "..."}],
     "usage": {"completion_tokens": 212}}

- ``messages``: at the top level, or under ``request`` or ``body`` (a logged request body);
  a content may be a string or a list of ``{"type": "text", "text": ...}`` parts.
- the output length: the recorded ``usage.completion_tokens`` (top level or under
  ``response``), else the request's ``max_completion_tokens`` / ``max_tokens``;
- the arrival: ``--time-field`` (default ``timestamp``), ISO 8601 (a time without a zone is
  read as UTC) or Unix seconds;
- the class: ``--class-field`` (a dotted path), default the header ``routing.class_header``
  routes on (``headers.<name>``, any case); it must be one of ``routing.allowed_classes``.
- the id: ``id`` or ``request_id`` (default ``line-<n>``); ids must be unique.

Every line that cannot be replayed is counted by reason with its line number (nothing is
dropped silently), including a context that does not fit the servers: input + output tokens
above ``max_model_len`` (the offending request ids are named).

Input tokens are counted with the served tokenizer when one is given (``--tokenizer DIR``: a
local Hugging Face tokenizer directory, its chat template applied as the server does), else
approximated: 4 UTF-8 bytes per token per message content, plus 4 tokens per message and 3
for the reply's start (the usual rule of thumb for BPE tokenizers on English text and the
ChatML framing; code and non-Latin text can take more tokens: give the tokenizer when a
context is near ``max_model_len``).

Privacy: prompts never reach the terminal, the report or logs: the profile names requests by
id and the sha256 of their messages only. ``--redact REGEX`` replaces every match with
``[REDACTED]`` before anything is hashed or written; the traffic file is created 0600.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

REDACTED = "[REDACTED]"
ROLES = ("system", "developer", "user", "assistant", "tool")
# The approximation (module docstring).
BYTES_PER_TOKEN = 4
TOKENS_PER_MESSAGE = 4
TOKENS_PER_REPLY = 3
TokenCounter = Callable[[list[dict[str, str]]], int]


class Message(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str


class TrafficRequest(BaseModel):
    """One request of a traffic file: what the replay sends, when, and how it is grouped."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    id: str = Field(min_length=1)
    prompt_class: str = Field(alias="class", min_length=1)
    messages: list[Message] = Field(min_length=1)
    output_tokens: int = Field(ge=1)
    """The recorded completion length: the replay asks for exactly this many (ignore_eos)."""
    offset_s: float = Field(ge=0)
    """Arrival after the log's first request, seconds."""
    input_tokens: int = Field(ge=1)
    """Its input length as imported: the report buckets it by the edges in force when the
    report is built (loadtest.traffic.length_buckets), so new edges need no re-import."""
    sha256: str
    """Of its messages as written (after redaction): names the prompt without showing it."""

    @model_validator(mode="before")
    @classmethod
    def _bucket_of_older_files(cls, data: Any) -> Any:
        # Files of the first importer carry the bucket label of the edges at import time;
        # the bucket now follows the edges at report time (input_tokens is kept).
        if isinstance(data, dict) and "input_bucket" in data:
            return {k: v for k, v in data.items() if k != "input_bucket"}
        return data


class Reason(StrEnum):
    """Why a log line cannot be replayed."""

    BLANK = "blank line"
    BAD_JSON = "not JSON"
    NOT_OBJECT = "not a JSON object"
    MISSING_MESSAGES = "no messages"
    EMPTY_MESSAGES = "empty messages"
    BAD_MESSAGE = "a message is not {role, content}"
    BAD_ROLE = "unknown message role"
    UNSUPPORTED_CONTENT = "non-text content part"
    MISSING_LENGTH = "no completion token count or max_tokens"
    NON_NUMERIC_LENGTH = "non-numeric output length"
    NON_POSITIVE_LENGTH = "output length <= 0"
    MISSING_TIMESTAMP = "no timestamp"
    BAD_TIMESTAMP = "unreadable timestamp"
    MISSING_CLASS = "no class"
    UNKNOWN_CLASS = "class not in routing.allowed_classes"
    BAD_ID = "id not a string or number"
    DUPLICATE_ID = "duplicate id"
    OVER_LONG = "input + output tokens over max_model_len"


class LineError(Exception):
    def __init__(self, reason: Reason, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


@dataclass
class Rejected:
    line: int
    reason: Reason
    detail: str  # names fields and ids, never content
    request_id: str | None = None


@dataclass
class ImportResult:
    requests: list[TrafficRequest]
    rejected: list[Rejected] = field(default_factory=list)
    lines: int = 0

    def by_reason(self) -> dict[Reason, list[Rejected]]:
        grouped: dict[Reason, list[Rejected]] = defaultdict(list)
        for entry in self.rejected:
            grouped[entry.reason].append(entry)
        return dict(grouped)


@dataclass(frozen=True)
class ImportSettings:
    allowed_classes: Sequence[str]
    max_model_len: int
    length_buckets: Sequence[int]
    class_field: str = "headers.x-prompt-class"
    time_field: str = "timestamp"
    redact: Sequence[str] = ()
    count_tokens: TokenCounter | None = None  # None: the approximation


def approximate_tokens(messages: list[dict[str, str]]) -> int:
    """Input tokens by the approximation of the module docstring."""
    body = sum(math.ceil(len(m["content"].encode()) / BYTES_PER_TOKEN) for m in messages)
    return body + TOKENS_PER_MESSAGE * len(messages) + TOKENS_PER_REPLY


def tokenizer_counter(directory: str | Path) -> TokenCounter:
    """Input tokens as the served model counts them: its tokenizer with its chat template
    (transformers' apply_chat_template, add_generation_prompt as vLLM's chat endpoint does),
    from a local directory only (no hub download)."""
    try:
        from transformers import AutoTokenizer
    except ImportError as missing:
        raise ValueError(
            "--tokenizer needs transformers: pip install '.[traffic]' (or drop --tokenizer "
            "for the approximation of this module)"
        ) from missing

    tokenizer = AutoTokenizer.from_pretrained(str(directory), local_files_only=True)

    def count(messages: list[dict[str, str]]) -> int:
        if getattr(tokenizer, "chat_template", None):
            # Rendered to text, then tokenized without special tokens: as vLLM's chat endpoint
            # does (vllm-project/vllm 0.32 vllm/entrypoints/openai/chat_completion/protocol.py:
            # ChatCompletionRequest.add_special_tokens defaults to False).
            text = tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=True
            )
            return len(tokenizer(text, add_special_tokens=False)["input_ids"])
        text = "\n".join(m["content"] for m in messages)
        return len(tokenizer.encode(text)) + TOKENS_PER_MESSAGE * len(messages) + TOKENS_PER_REPLY

    return count


def bucket_label(tokens: int, edges: Sequence[int]) -> str:
    """The bucket of ``tokens`` under ``edges`` ([512, 2048]: 0-511, 512-2047, 2048+)."""
    low = 0
    for edge in edges:
        if tokens < edge:
            return f"{low}-{edge - 1}"
        low = edge
    return f"{low}+"


def record_bucket(input_tokens: int | None, edges: Sequence[int] | None) -> str:
    """A replayed request's bucket under ``edges``; "" when it has no recorded input length
    (a prompt-suite request) or there are no edges (no trace in the run)."""
    if input_tokens is None or edges is None:
        return ""
    return bucket_label(input_tokens, edges)


def bucket_labels(edges: Sequence[int]) -> list[str]:
    """Every bucket of ``edges``, shortest first."""
    return [bucket_label(0, edges), *(bucket_label(edge, edges) for edge in edges)]


def _lookup(data: dict[str, Any], path: str) -> Any:
    """A dotted path in ``data``; a ``headers`` mapping is matched case-insensitively."""
    node: Any = data
    parts = path.split(".")
    for position, part in enumerate(parts):
        if not isinstance(node, dict):
            return None
        if part in node:
            node = node[part]
            continue
        if position > 0 and parts[position - 1].lower() == "headers":
            matches = [
                v for k, v in node.items() if isinstance(k, str) and k.lower() == part.lower()
            ]
            node = matches[0] if matches else None
            continue
        return None
    return node


def _messages(data: dict[str, Any]) -> list[dict[str, str]]:
    raw = data.get("messages")
    where = "messages"
    for parent in ("request", "body"):
        if raw is None and isinstance(data.get(parent), dict):
            raw, where = data[parent].get("messages"), f"{parent}.messages"
    if raw is None:
        raise LineError(
            Reason.MISSING_MESSAGES, "no field messages, request.messages or body.messages"
        )
    if not isinstance(raw, list):
        raise LineError(Reason.BAD_MESSAGE, f"{where} is not a list")
    if not raw:
        raise LineError(Reason.EMPTY_MESSAGES, f"{where} is empty")
    messages = []
    for number, message in enumerate(raw):
        at = f"{where}[{number}]"
        if not isinstance(message, dict) or "role" not in message or "content" not in message:
            raise LineError(Reason.BAD_MESSAGE, f"{at} needs role and content")
        role = message["role"]
        if role not in ROLES:
            raise LineError(Reason.BAD_ROLE, f"{at}.role is not one of {list(ROLES)}")
        messages.append({"role": role, "content": _text(message["content"], f"{at}.content")})
    return messages


def _text(content: Any, at: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for number, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text":
                raise LineError(Reason.UNSUPPORTED_CONTENT, f"{at}[{number}] is not a text part")
            if not isinstance(part.get("text"), str):
                raise LineError(Reason.BAD_MESSAGE, f"{at}[{number}].text is not a string")
            parts.append(part["text"])
        return "".join(parts)
    raise LineError(Reason.BAD_MESSAGE, f"{at} is neither a string nor a list of text parts")


LENGTH_FIELDS = (
    "usage.completion_tokens",
    "response.usage.completion_tokens",
    "max_completion_tokens",
    "max_tokens",
    "request.max_completion_tokens",
    "request.max_tokens",
    "body.max_completion_tokens",
    "body.max_tokens",
)


def _output_tokens(data: dict[str, Any]) -> int:
    for path in LENGTH_FIELDS:
        value = _lookup(data, path)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise LineError(Reason.NON_NUMERIC_LENGTH, f"{path} is not a number")
        if not math.isfinite(value) or value != int(value):
            raise LineError(Reason.NON_NUMERIC_LENGTH, f"{path} is not a whole number")
        if value <= 0:
            raise LineError(Reason.NON_POSITIVE_LENGTH, f"{path} is {int(value)}")
        return int(value)
    raise LineError(Reason.MISSING_LENGTH, f"none of {', '.join(LENGTH_FIELDS)}")


def _timestamp(data: dict[str, Any], path: str) -> float:
    value = _lookup(data, path)
    if value is None:
        raise LineError(Reason.MISSING_TIMESTAMP, f"no field {path}")
    if isinstance(value, bool):
        raise LineError(Reason.BAD_TIMESTAMP, f"{path} is a boolean")
    if isinstance(value, int | float):
        if not math.isfinite(value) or value < 0:
            raise LineError(Reason.BAD_TIMESTAMP, f"{path} is not a Unix time in seconds")
        return float(value)
    if isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            raise LineError(Reason.BAD_TIMESTAMP, f"{path} is not ISO 8601") from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return moment.timestamp()
    raise LineError(Reason.BAD_TIMESTAMP, f"{path} is neither ISO 8601 nor Unix seconds")


def _request_id(data: dict[str, Any], line: int) -> str:
    value = data.get("id", data.get("request_id"))
    if value is None:
        return f"line-{line}"
    if isinstance(value, bool) or not isinstance(value, str | int) or not str(value):
        raise LineError(Reason.BAD_ID, "id is not a non-empty string or number")
    return str(value)


def messages_sha256(messages: Iterable[dict[str, str]]) -> str:
    text = json.dumps(list(messages), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass
class _Parsed:
    line: int
    id: str
    prompt_class: str
    messages: list[dict[str, str]]
    output_tokens: int
    time_s: float
    input_tokens: int


def _parse(
    raw: str | bytes, line: int, settings: ImportSettings, patterns: list[re.Pattern[str]]
) -> _Parsed:
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise LineError(Reason.BAD_JSON, f"not UTF-8 at byte {err.start}") from None
    text = raw
    if not text.strip():
        raise LineError(Reason.BLANK, "blank")
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise LineError(Reason.BAD_JSON, f"column {getattr(err, 'colno', '?')}") from None
    if not isinstance(data, dict):
        raise LineError(Reason.NOT_OBJECT, type(data).__name__)
    request_id = _request_id(data, line)
    messages = _messages(data)
    for pattern in patterns:  # before anything is counted, hashed or written
        for message in messages:
            message["content"] = pattern.sub(REDACTED, message["content"])
    output_tokens = _output_tokens(data)
    time_s = _timestamp(data, settings.time_field)
    prompt_class = _lookup(data, settings.class_field)
    if prompt_class is None or prompt_class == "":
        raise LineError(Reason.MISSING_CLASS, f"no field {settings.class_field}")
    if not isinstance(prompt_class, str) or prompt_class not in settings.allowed_classes:
        raise LineError(
            Reason.UNKNOWN_CLASS,
            f"{settings.class_field} is not one of {list(settings.allowed_classes)} (set "
            "routing.allowed_classes)",
        )
    count = settings.count_tokens or approximate_tokens
    return _Parsed(
        line=line,
        id=request_id,
        prompt_class=prompt_class,
        messages=messages,
        output_tokens=output_tokens,
        time_s=time_s,
        input_tokens=max(1, count(messages)),
    )


def import_lines(lines: Iterable[str | bytes], settings: ImportSettings) -> ImportResult:
    """Every line either becomes a request or is rejected with its reason and number."""
    patterns = [re.compile(expression) for expression in settings.redact]
    parsed: list[_Parsed] = []
    rejected: list[Rejected] = []
    seen: set[str] = set()
    total = 0
    for number, text in enumerate(lines, 1):
        total = number
        try:
            entry = _parse(text, number, settings, patterns)
        except LineError as err:
            rejected.append(Rejected(number, err.reason, err.detail))
            continue
        if entry.id in seen:
            rejected.append(
                Rejected(number, Reason.DUPLICATE_ID, f"id {entry.id!r} again", entry.id)
            )
            continue
        seen.add(entry.id)
        if entry.input_tokens + entry.output_tokens > settings.max_model_len:
            rejected.append(
                Rejected(
                    number,
                    Reason.OVER_LONG,
                    f"{entry.id}: {entry.input_tokens} input + {entry.output_tokens} output "
                    f"tokens > max_model_len {settings.max_model_len}",
                    entry.id,
                )
            )
            continue
        parsed.append(entry)
    start = min((p.time_s for p in parsed), default=0.0)
    parsed.sort(key=lambda p: (p.time_s, p.line))
    # Validated from a mapping: the class is written under its alias "class".
    requests = [
        TrafficRequest.model_validate(
            {
                "id": p.id,
                "class": p.prompt_class,
                "messages": p.messages,
                "output_tokens": p.output_tokens,
                "offset_s": round(p.time_s - start, 6),
                "input_tokens": p.input_tokens,
                "sha256": messages_sha256(p.messages),
            }
        )
        for p in parsed
    ]
    return ImportResult(requests=requests, rejected=rejected, lines=total)


def import_log(path: Path, settings: ImportSettings) -> ImportResult:
    with Path(path).open("rb") as handle:  # decoded per line: one bad byte costs one line
        return import_lines((line.rstrip(b"\r\n") for line in handle), settings)


def write_traffic(requests: Sequence[TrafficRequest], path: Path) -> Path:
    """The traffic file, JSONL, readable by its owner only (0600, also when it existed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(descriptor, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        for request in requests:
            handle.write(request.model_dump_json(by_alias=True) + "\n")
    return path


def read_traffic(path: str | Path) -> list[TrafficRequest]:
    """A traffic file, every line validated (an error names the line and the field)."""
    file = Path(path)
    if not file.is_file():
        raise ValueError(
            f"traffic file {str(path)!r} does not exist; write one with `python -m loadtest "
            "traffic import LOG --out FILE` and check loadtest.traffic.file"
        )
    requests = []
    for number, line in enumerate(file.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            requests.append(TrafficRequest.model_validate_json(line))
        except ValidationError as err:
            first = err.errors()[0]
            where = ".".join(str(part) for part in first["loc"]) or "line"
            raise ValueError(f"{file}:{number}: {where}: {first['msg']}") from None
    if not requests:
        raise ValueError(f"traffic file {file} holds no requests")
    ids = Counter(r.id for r in requests)
    twice = sorted(i for i, n in ids.items() if n > 1)
    if twice:
        raise ValueError(f"{file}: request ids {twice[:5]} appear more than once")
    return requests


def over_long(requests: Iterable[TrafficRequest], max_model_len: int) -> list[str]:
    """Ids of the requests whose input + output tokens exceed ``max_model_len``."""
    return [r.id for r in requests if r.input_tokens + r.output_tokens > max_model_len]


# --------------------------------------------------------------------------- the profile


def _quantiles(values: Sequence[int]) -> str:
    if not values:
        return "none"
    ordered = sorted(values)

    def at(q: float) -> int:
        return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]

    return f"min {ordered[0]}, p50 {at(0.5)}, p90 {at(0.9)}, p99 {at(0.99)}, max {ordered[-1]}"


def per_second(requests: Sequence[TrafficRequest]) -> list[int]:
    """Arrivals in each second of the trace, from its first request."""
    if not requests:
        return []
    counts = [0] * (int(max(r.offset_s for r in requests)) + 1)
    for request in requests:
        counts[int(request.offset_s)] += 1
    return counts


BURST_FACTOR = 3.0  # a second with at least this times the mean rate (and 2+ requests)
SPARK = " .:-=+*#%@"


def bursts(counts: Sequence[int]) -> list[int]:
    """The seconds that are bursts: at least BURST_FACTOR x the mean rate, and 2+ arrivals."""
    if not counts:
        return []
    mean = sum(counts) / len(counts)
    return [s for s, n in enumerate(counts) if n >= 2 and n >= BURST_FACTOR * mean]


def _spark(counts: Sequence[int], width: int = 60) -> str:
    if not counts:
        return ""
    step = max(1, math.ceil(len(counts) / width))
    binned = [sum(counts[i : i + step]) for i in range(0, len(counts), step)]
    top = max(binned) or 1
    return "".join(
        SPARK[min(len(SPARK) - 1, math.ceil(n / top * (len(SPARK) - 1)))] for n in binned
    )


def _cell_order(cell: tuple[str, str]) -> tuple[str, int]:
    return cell[0], int(cell[1].split("-")[0].rstrip("+"))


def profile(result: ImportResult, *, approximate: bool, length_buckets: Sequence[int]) -> str:
    """The traffic's profile and every rejected line, by reason: ids and hashes, no prompt.
    Input buckets by ``length_buckets`` (the configured edges)."""
    requests = result.requests
    lines = [
        f"{len(requests)} requests from {result.lines} lines; {len(result.rejected)} lines "
        "not usable"
    ]
    for reason, entries in sorted(result.by_reason().items(), key=lambda kv: kv[0].value):
        numbers = ", ".join(str(e.line) for e in entries[:20])
        more = f" and {len(entries) - 20} more" if len(entries) > 20 else ""
        lines.append(f"  {reason.value}: {len(entries)} (lines {numbers}{more})")
        if reason in (Reason.OVER_LONG, Reason.DUPLICATE_ID):
            for entry in entries[:20]:
                lines.append(f"    line {entry.line}: {entry.detail}")
        else:
            for entry in entries[:3]:
                lines.append(f"    line {entry.line}: {entry.detail}")
    if not requests:
        return "\n".join(lines)
    counted = "approximated (no --tokenizer)" if approximate else "served tokenizer"
    lines.append("requests per class:")
    for name, n in sorted(Counter(r.prompt_class for r in requests).items()):
        lines.append(f"  {name}: {n}")
    lines.append(f"input tokens ({counted}): {_quantiles([r.input_tokens for r in requests])}")
    lines.append(f"output tokens: {_quantiles([r.output_tokens for r in requests])}")
    lines.append("per class and input bucket:")
    groups: dict[tuple[str, str], list[TrafficRequest]] = defaultdict(list)
    for request in requests:
        groups[(request.prompt_class, bucket_label(request.input_tokens, length_buckets))].append(
            request
        )
    for (name, bucket), members in sorted(groups.items(), key=lambda kv: _cell_order(kv[0])):
        lines.append(
            f"  {name} {bucket}: {len(members)} requests, output "
            f"{_quantiles([m.output_tokens for m in members])}"
        )
    counts = per_second(requests)
    duration = requests[-1].offset_s
    rate = len(requests) / duration if duration > 0 else float("inf")
    peak = max(counts)
    lines.append(
        f"arrivals: {duration:.1f} s, mean {rate:.2f} requests/s, peak {peak} in second "
        f"{counts.index(peak)}; bursts (>= {BURST_FACTOR:g}x the mean, 2+) in "
        f"{len(bursts(counts))} seconds"
    )
    lines.append(f"  per second |{_spark(counts)}|")
    lines.append("requests (id, class, bucket, sha256 of messages):")
    for request in requests[:10]:
        lines.append(
            f"  {request.id} {request.prompt_class} "
            f"{bucket_label(request.input_tokens, length_buckets)} {request.sha256[:16]}"
        )
    if len(requests) > 10:
        lines.append(f"  ... {len(requests) - 10} more")
    return "\n".join(lines)


# --------------------------------------------------------------------------- the cluster

TRAFFIC_COPY = "traffic.jsonl"  # the copy's name in the run directory
CHUNK_BYTES = 1 << 20


def fetch_traffic(bucket: str, key: str, dest: Path, *, region: str, client: Any = None) -> Path:
    """Copy ``s3://bucket/key`` (the encrypted model-store bucket) to ``dest`` (0600), then
    check it reads as a traffic file. ``client``: a boto3 S3 client (tests pass a stub).
    What is logged names the object and its size, never its content: botocore's own loggers
    stay above DEBUG while the body streams (its debug log prints wire data)."""
    import logging

    from botocore.exceptions import BotoCoreError, ClientError

    if client is None:
        import boto3
        from botocore.config import Config

        client = boto3.Session(region_name=region).client(
            "s3", config=Config(retries={"max_attempts": 5, "mode": "standard"})
        )
    loggers = [logging.getLogger(name) for name in ("botocore", "boto3", "urllib3")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(max(logger.getEffectiveLevel(), logging.INFO))
    dest.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(descriptor, 0o600)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            body = client.get_object(Bucket=bucket, Key=key)["Body"]
            for chunk in body.iter_chunks(CHUNK_BYTES):
                handle.write(chunk)
    except (BotoCoreError, ClientError) as err:
        dest.unlink(missing_ok=True)
        raise ValueError(
            f"could not read the traffic file s3://{bucket}/{key}: {err}; upload it there "
            "first (docs/traffic.md) or check loadtest.traffic.file and bucket_prefix"
        ) from None
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)
    requests = read_traffic(dest)  # a malformed copy fails here, naming line and field
    logging.getLogger("loadtest").info(
        "traffic file s3://%s/%s: %d requests, %d bytes",
        bucket,
        key,
        len(requests),
        dest.stat().st_size,
    )
    return dest
