"""The HTTP checks: each arm serves the configured model, and the gateway answers every class
on its route.

They talk to an ``Endpoint``: ``UrlEndpoint`` for an address this machine reaches (the local
stack, a Prometheus), a port-forward to a pod on the cluster (``deploy_check.kube``), where
the NetworkPolicies admit only the gateway's Envoy and the load-test pods to the serving port.
The requests are the ones the load test and the probe send: vLLM's OpenAI API, the class in
``routing.class_header``.
"""

from __future__ import annotations

import http.client
import json
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from deploy_check.model import Group, Result
from experiment.config import Arm, ExperimentConfig

DEFAULT_TIMEOUT_S = 30.0
# vLLM's OpenAI-compatible server (vllm/entrypoints/openai/api_server.py): GET /v1/models
# lists the served model names ({"data": [{"id": ...}]}); POST /v1/completions, streamed as
# server-sent events ("data: {...}" lines, "data: [DONE]" last) when "stream" is true.
MODELS_PATH = "/v1/models"
COMPLETIONS_PATH = "/v1/completions"
SSE_DATA = "data:"
SSE_DONE = "[DONE]"
# The smallest completion that proves a route serves: one token, greedy.
PROMPT = "Say OK."
SHOWN_BODY = 200  # characters of an unexpected answer quoted in a failure


class HttpError(Exception):
    """No answer: refused, reset, timed out, or the port-forward could not be opened."""


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes
    content_type: str = ""

    def json(self) -> Any:
        return json.loads(self.body)

    def shown(self) -> str:
        return self.body.decode(errors="replace")[:SHOWN_BODY]


class Endpoint(Protocol):
    """Where requests go; ``where`` names it in messages (a URL, or a pod and port)."""

    @property
    def where(self) -> str: ...

    def request(
        self,
        method: str,
        path: str,
        *,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Reply: ...


def exchange(
    connection: http.client.HTTPConnection,
    method: str,
    path: str,
    body: bytes | None,
    headers: Mapping[str, str] | None,
) -> Reply:
    """One request on ``connection`` (closed afterwards); transport failures as HttpError."""
    try:
        connection.request(method, path, body=body, headers=dict(headers or {}))
        response = connection.getresponse()
        return Reply(response.status, response.read(), response.getheader("Content-Type", ""))
    except (OSError, http.client.HTTPException) as err:
        raise HttpError(f"{type(err).__name__}: {err}") from None
    finally:
        connection.close()


@dataclass(frozen=True)
class UrlEndpoint:
    """``http://`` or ``https://`` base URL (a path prefix is kept, as in an AMP workspace's)."""

    base_url: str
    timeout_s: float = DEFAULT_TIMEOUT_S

    @property
    def where(self) -> str:
        return self.base_url

    def request(
        self,
        method: str,
        path: str,
        *,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Reply:
        parts = urllib.parse.urlsplit(self.base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise HttpError(f"{self.base_url!r} is not an http:// or https:// URL")
        secure = parts.scheme == "https"
        kind = http.client.HTTPSConnection if secure else http.client.HTTPConnection
        connection = kind(parts.hostname, parts.port, timeout=self.timeout_s)
        return exchange(connection, method, parts.path.rstrip("/") + path, body, headers)


def served_model_names(endpoint: Endpoint) -> list[str]:
    """The ids ``GET /v1/models`` lists; HttpError when it answers anything else."""
    reply = endpoint.request("GET", MODELS_PATH)
    if reply.status != 200:
        raise HttpError(f"GET {MODELS_PATH} answered HTTP {reply.status}: {reply.shown()}")
    try:
        return [str(entry["id"]) for entry in reply.json()["data"]]
    except (ValueError, KeyError, TypeError):
        raise HttpError(f"GET {MODELS_PATH} answered no model list: {reply.shown()}") from None


def model_title(arm: Arm, model: str) -> str:
    return f"the {arm.value} arm serves {model}"


def model_result(
    group: Group, arm: Arm, endpoints: Sequence[Endpoint], model: str, *, unreachable_fix: str
) -> Result:
    """Every endpoint of the arm lists ``model`` (the served name, ``serving.target_model``)."""
    title = model_title(arm, model)
    if not endpoints:
        return Result.skipped(group, title, f"no Ready {arm.value} pod to ask (see above)")
    seen = []
    for endpoint in endpoints:
        try:
            names = served_model_names(endpoint)
        except HttpError as err:
            return Result.failed(group, title, f"{endpoint.where}: {err}", unreachable_fix)
        if model not in names:
            return Result.failed(
                group,
                title,
                f"{endpoint.where} serves {names}, not {model}",
                "its server was started from another configuration: check with the -c/--config "
                "it was deployed (or started) with, or deploy this one",
            )
        seen.append(endpoint.where)
    return Result.passed(group, title, f"GET {MODELS_PATH} lists it at {', '.join(seen)}")


def completion_body(model: str) -> bytes:
    """A one-token greedy streamed completion, as the load test streams (loadtest/client.py)."""
    request = {"model": model, "prompt": PROMPT, "max_tokens": 1, "temperature": 0.0}
    return json.dumps({**request, "stream": True}).encode()


def _choices(payload: Any) -> bool:
    return isinstance(payload, dict) and bool(payload.get("choices"))


def answered(reply: Reply) -> bool:
    """A completion came back: an event (or a plain JSON answer) with a choice in it."""
    text = reply.body.decode(errors="replace")
    events = [
        line[len(SSE_DATA) :].strip() for line in text.splitlines() if line.startswith(SSE_DATA)
    ]
    payloads = [event for event in events if event != SSE_DONE] or [text]
    for payload in payloads:
        try:
            if _choices(json.loads(payload)):
                return True
        except ValueError:
            continue
    return False


@dataclass(frozen=True)
class RouteCase:
    """A request of ``prompt_class`` (None: no class header) and where the routing sends it."""

    prompt_class: str | None
    rule: str
    arm: Arm

    @property
    def title(self) -> str:
        sent = f"class {self.prompt_class}" if self.prompt_class else "a request without a class"
        return f"the gateway answers {sent} (rule {self.rule} -> {self.arm.value})"


def route_cases(config: ExperimentConfig) -> list[RouteCase]:
    """Every allowed class and the classless request, each with the rule and arm that
    ``RoutingConfig.arm_for`` (the rule both gateway renderings enact) gives it."""
    routing = config.routing
    cases = []
    for prompt_class in [*routing.allowed_classes, None]:
        arm = routing.arm_for([prompt_class] if prompt_class else [])
        rule_class = prompt_class if arm is Arm.SPECULATIVE else None
        cases.append(RouteCase(prompt_class, routing.rule_name(rule_class), arm))
    return cases


def route_result(
    group: Group,
    config: ExperimentConfig,
    case: RouteCase,
    gateway: Endpoint,
    *,
    unreachable_fix: str,
    route_fix: str,
) -> Result:
    """One tiny completion through the gateway with the case's class header."""
    headers = {"Content-Type": "application/json"}
    if case.prompt_class:
        headers[config.routing.class_header] = case.prompt_class
    body = completion_body(config.serving.target_model)
    try:
        reply = gateway.request("POST", COMPLETIONS_PATH, body=body, headers=headers)
    except HttpError as err:
        return Result.failed(group, case.title, f"{gateway.where}: {err}", unreachable_fix)
    if reply.status != 200 or not answered(reply):
        return Result.failed(
            group,
            case.title,
            f"POST {COMPLETIONS_PATH} at {gateway.where} answered HTTP {reply.status}: "
            f"{reply.shown()}",
            route_fix.format(arm=case.arm.value, rule=case.rule),
        )
    return Result.passed(group, case.title, f"a completion from {gateway.where}")
