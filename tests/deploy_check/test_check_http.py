"""The HTTP checks of ``python -m experiment check`` (deploy_check/http.py) against canned
answers in vLLM's shapes: each passes on a healthy answer and fails, saying what to change,
on an unhealthy one. No socket: the endpoints are fakes."""

from __future__ import annotations

import json

import pytest
from check_fakes import FakeEndpoint, completion_stream, json_reply, models_reply

from deploy_check.http import (
    COMPLETIONS_PATH,
    MODELS_PATH,
    Reply,
    answered,
    model_result,
    route_cases,
    route_result,
)
from deploy_check.model import Group, Status
from experiment import build_config
from experiment.config import Arm
from experiment.loading import context_from_pairs

CONFIG = build_config({})
MODEL = CONFIG.serving.target_model


def arm_endpoint(*names: str) -> FakeEndpoint:
    return FakeEndpoint("http://127.0.0.1:8101", {("GET", MODELS_PATH): models_reply(*names)})


def test_an_arm_serving_the_configured_model_passes() -> None:
    result = model_result(
        Group.SERVING, Arm.BASELINE, [arm_endpoint(MODEL)], MODEL, unreachable_fix="start it"
    )
    assert result.status is Status.PASSED, result
    assert result.title == f"the baseline arm serves {MODEL}"


def test_an_arm_serving_another_model_fails_and_says_to_check_with_the_deploys_config() -> None:
    result = model_result(
        Group.SERVING, Arm.SPECULATIVE, [arm_endpoint("Qwen/Qwen3-8B")], MODEL, unreachable_fix=""
    )
    assert result.status is Status.FAILED
    assert "serves ['Qwen/Qwen3-8B'], not Qwen/Qwen3-32B" in result.detail
    assert "-c/--config" in result.fix


def test_an_arm_that_does_not_answer_fails_with_the_given_fix() -> None:
    result = model_result(
        Group.SERVING, Arm.BASELINE, [FakeEndpoint("http://x")], MODEL, unreachable_fix="start it"
    )
    assert result.status is Status.FAILED
    assert "Connection refused" in result.detail and result.fix == "start it"


def test_an_arm_without_a_ready_pod_is_skipped_its_readiness_failed_already() -> None:
    result = model_result(Group.SERVING, Arm.BASELINE, [], MODEL, unreachable_fix="")
    assert result.status is Status.SKIPPED and "no Ready baseline pod" in result.detail


def test_a_model_list_that_is_not_one_fails() -> None:
    endpoint = FakeEndpoint("http://x", {("GET", MODELS_PATH): json_reply({"detail": "nope"})})
    result = model_result(Group.SERVING, Arm.BASELINE, [endpoint], MODEL, unreachable_fix="fix")
    assert result.status is Status.FAILED and "no model list" in result.detail


def test_a_completion_is_recognized_streamed_or_not() -> None:
    assert answered(completion_stream(MODEL))
    plain = {"id": "cmpl-1", "object": "text_completion", "choices": [{"index": 0, "text": "OK"}]}
    assert answered(json_reply(plain))
    assert not answered(Reply(200, b"data: [DONE]\n\n"))
    assert not answered(json_reply({"object": "error", "message": "model not found"}))


def test_every_allowed_class_and_the_classless_request_are_routed_as_arm_for_decides() -> None:
    config = build_config(
        context_from_pairs(["routing.allowed_classes=[structured,open_ended,code]",
                            "routing.speculative_classes=[structured,code]"])
    )  # fmt: skip
    cases = {(case.prompt_class, case.rule, case.arm) for case in route_cases(config)}
    assert cases == {
        ("structured", "speculative-0", Arm.SPECULATIVE),
        ("code", "speculative-1", Arm.SPECULATIVE),
        ("open_ended", "everything-else", Arm.BASELINE),
        (None, "everything-else", Arm.BASELINE),
    }


@pytest.mark.parametrize("prompt_class", ["structured", None])
def test_the_gateway_answering_a_class_passes_and_the_request_carries_its_header(
    prompt_class: str | None,
) -> None:
    (case,) = [c for c in route_cases(CONFIG) if c.prompt_class == prompt_class]
    gateway = FakeEndpoint("http://gw", {("POST", COMPLETIONS_PATH): completion_stream(MODEL)})
    result = route_result(
        Group.SERVING, CONFIG, case, gateway, unreachable_fix="", route_fix="{rule} {arm}"
    )
    assert result.status is Status.PASSED, result
    ((method, path, body, headers),) = gateway.sent
    assert (method, path) == ("POST", COMPLETIONS_PATH)
    assert headers.get(CONFIG.routing.class_header) == prompt_class
    sent = json.loads(body or b"")
    assert sent["model"] == MODEL and sent["max_tokens"] == 1 and sent["stream"] is True


def test_the_gateway_failing_a_class_fails_naming_its_rule_and_arm() -> None:
    (case,) = [c for c in route_cases(CONFIG) if c.prompt_class == "structured"]
    broken = Reply(503, b"upstream connect error or disconnect/reset before headers", "text/plain")
    gateway = FakeEndpoint("http://gw", {("POST", COMPLETIONS_PATH): broken})
    result = route_result(
        Group.SERVING,
        CONFIG,
        case,
        gateway,
        unreachable_fix="",
        route_fix="the {rule} rule sends it to the {arm} arm",
    )
    assert result.status is Status.FAILED
    assert "HTTP 503: upstream connect error" in result.detail
    assert result.fix == "the speculative-0 rule sends it to the speculative arm"
    assert (
        result.title == "the gateway answers class structured (rule speculative-0 -> speculative)"
    )


def test_an_unreachable_gateway_fails_with_the_unreachable_fix() -> None:
    (case, *_) = route_cases(CONFIG)
    result = route_result(
        Group.SERVING, CONFIG, case, FakeEndpoint("http://gw"), unreachable_fix="up", route_fix=""
    )
    assert result.status is Status.FAILED and result.fix == "up"
