"""Fakes of the check's HTTP side for tests/experiment/test_check_*.py: an endpoint answering
canned replies (no socket), and the Prometheus API's answers in the shapes Prometheus
2.42 and AMP return them (prometheus docs/querying/api.md; AMP user guide, ListRules and
ListAlerts samples)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from deploy_check.http import HttpError, Reply

NOW = 1_764_320_000.0  # the backend's clock in the Prometheus fakes (2025-11-28)


@dataclass
class FakeEndpoint:
    """Answers ``(method, path) -> Reply`` (or raises HttpError for a missing one: refused);
    ``answer`` computes a reply instead, e.g. from the query string. Records every request."""

    where: str
    replies: dict[tuple[str, str], Reply] = field(default_factory=dict)
    answer: Callable[[str, str, Mapping[str, str]], Reply] | None = None
    sent: list[tuple[str, str, bytes | None, dict[str, str]]] = field(default_factory=list)

    def request(
        self,
        method: str,
        path: str,
        *,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Reply:
        self.sent.append((method, path, body, dict(headers or {})))
        if self.answer is not None:
            return self.answer(method, path, headers or {})
        if (method, path) not in self.replies:
            raise HttpError("ConnectionRefusedError: [Errno 111] Connection refused")
        return self.replies[(method, path)]


def json_reply(payload: Any, status: int = 200) -> Reply:
    return Reply(status, json.dumps(payload).encode(), "application/json")


def models_reply(*names: str) -> Reply:
    """vLLM's GET /v1/models (vllm/entrypoints/openai/protocol.py ModelList)."""
    data = [
        {"id": name, "object": "model", "created": 1764320000, "owned_by": "vllm",
         "root": f"/models/checkpoints/{name}", "parent": None, "max_model_len": 4096}
        for name in names
    ]  # fmt: skip
    return json_reply({"object": "list", "data": data})


def completion_stream(model: str) -> Reply:
    """A one-token streamed completion as vLLM writes it (text/event-stream)."""
    choice = {"index": 0, "text": "OK", "logprobs": None, "finish_reason": "length"}
    event = {"id": "cmpl-1", "object": "text_completion", "created": 1764320000, "model": model,
             "choices": [choice]}  # fmt: skip
    body = f"data: {json.dumps(event)}\n\ndata: [DONE]\n\n".encode()
    return Reply(200, body, "text/event-stream; charset=utf-8")


def success(data: Any) -> Reply:
    return json_reply({"status": "success", "data": data})


def vector(*rows: tuple[Mapping[str, str], float], at: float = NOW) -> Reply:
    """An instant query's answer: each row (labels, value)."""
    result = [{"metric": dict(labels), "value": [at, repr(value)]} for labels, value in rows]
    return success({"resultType": "vector", "result": result})


def prometheus_error(message: str, status: int = 400) -> Reply:
    return json_reply({"status": "error", "errorType": "bad_data", "error": message}, status)
