"""The ``routing`` section: bad values refused naming the setting, the allow-list rule
(``RoutingConfig.arm_for``), per-class floors, and the ``-c`` line that enacts a decision."""

from __future__ import annotations

import shlex

import pytest

from experiment import ConfigError, build_config
from experiment.config import Arm, RoutingConfig, routing_override_line
from experiment.loading import context_from_pairs

BAD_ROUTING: dict[str, tuple[list[str], str]] = {
    "header-with-space": (["routing.class_header=x prompt"], r"routing\.class_header 'x prompt'"),
    "header-upper-case": (
        ["routing.class_header=X-Prompt-Class"],
        r"routing\.class_header 'X-Prompt-Class' is not a lower-case HTTP header name",
    ),
    "header-pseudo": (["routing.class_header=:path"], r"routing\.class_header ':path'"),
    "header-empty": (['routing.class_header=""'], r"routing\.class_header ''"),
    "header-reserved": (
        ["routing.class_header=content-length"],
        r"routing\.class_header 'content-length' is a header proxies rewrite",
    ),
    "speculative-not-allowed": (
        ["routing.speculative_classes=structured,code"],
        r"routing\.speculative_classes \['code'\] are not in routing\.allowed_classes",
    ),
    "class-upper-case": (
        ["routing.allowed_classes=Structured"],
        r"routing\.allowed_classes.*'Structured' is not a class name",
    ),
    "class-with-space": (
        ['routing.allowed_classes=["open ended"]'],
        r"routing\.allowed_classes.*'open ended' is not a class name",
    ),
    "class-repeated": (
        ["routing.speculative_classes=structured,structured"],
        r"routing\.speculative_classes.*\['structured'\] are listed more than once",
    ),
    "floor-zero": (["routing.acceptance_floors.structured=0"], r"routing\.acceptance_floors"),
    "floor-above-one": (
        ["routing.acceptance_floors.structured=1.5"],
        r"routing\.acceptance_floors",
    ),
    "floor-unknown-class": (
        ["routing.acceptance_floors.code=0.5"],
        r"routing\.acceptance_floors names \['code'\], not in routing\.allowed_classes",
    ),
    "retries-two": (["routing.fallback.retries=2"], r"routing\.fallback\.retries"),
    "retry-trigger-unknown": (
        ["routing.fallback.retry_on=connect-failure,timeout"],
        r"routing\.fallback\.retry_on",
    ),
    "retry-trigger-twice": (
        ["routing.fallback.retry_on=5xx,5xx"],
        r"routing\.fallback\.retry_on \['5xx', '5xx'\] lists a trigger twice",
    ),
    "retries-without-triggers": (
        ["routing.fallback.retry_on=[]"],
        r"routing\.fallback\.retry_on is empty while routing\.fallback\.retries is 1",
    ),
    "consecutive-5xx-zero": (["routing.health.consecutive_5xx=0"], r"routing\.health\.consecut"),
    "ejection-time-zero": (
        ["routing.health.base_ejection_time_s=0"],
        r"routing\.health\.base_ejection_time_s",
    ),
    "gateway-port-is-a-server-port": (
        ["local.gateway_port=8101"],
        r"local\.gateway_port 8101 is a server's port",
    ),
    "gateway-port-privileged": (["local.gateway_port=80"], r"local\.gateway_port"),
}


@pytest.mark.parametrize("name", sorted(BAD_ROUTING))
def test_bad_routing_values_are_refused_naming_the_setting(name: str) -> None:
    pairs, message = BAD_ROUTING[name]
    with pytest.raises(ConfigError, match=message):
        build_config(context_from_pairs(pairs))


def test_defaults_send_structured_to_the_speculative_arm_by_x_prompt_class() -> None:
    routing = build_config({}).routing
    assert routing.class_header == "x-prompt-class"
    assert routing.speculative_classes == ["structured"]
    assert set(routing.allowed_classes) == {"structured", "open_ended"}
    assert routing.fallback.retries == 1
    assert routing.fallback.retry_on == ["connect-failure", "reset", "5xx"]
    assert build_config({}).local.tiered is False


def test_the_default_classes_are_the_prompt_files_classes() -> None:
    from loadtest.prompts import load_prompts

    config = build_config({})
    files = [*config.loadtest.prompts.files, *config.local.extra_prompt_files]
    classes = {prompt.prompt_class for prompt in load_prompts(files)}
    assert set(config.routing.allowed_classes) == classes


def test_the_acceptance_floor_defaults_to_the_guardrail_and_can_differ_per_class() -> None:
    config = build_config(context_from_pairs(["routing.acceptance_floors.structured=0.6"]))
    default = config.guardrails.min_acceptance_rate
    assert config.routing.acceptance_floor("structured", default) == 0.6
    assert config.routing.acceptance_floor("open_ended", default) == default
    lowered = build_config(context_from_pairs(["guardrails.min_acceptance_rate=0.2"]))
    assert lowered.routing.acceptance_floor("structured", 0.2) == 0.2


ROUTING = RoutingConfig(
    allowed_classes=["structured", "open_ended", "code"], speculative_classes=["structured", "code"]
)


@pytest.mark.parametrize(
    ("values", "arm"),
    [
        (["structured"], Arm.SPECULATIVE),
        (["code"], Arm.SPECULATIVE),
        ([" structured\t"], Arm.SPECULATIVE),  # OWS is not part of an HTTP field value
        (["open_ended"], Arm.BASELINE),  # allowed, not speculative
        ([], Arm.BASELINE),  # missing
        ([""], Arm.BASELINE),
        (["Structured"], Arm.BASELINE),
        (["STRUCTURED"], Arm.BASELINE),
        (["structured, open_ended"], Arm.BASELINE),
        (["structured,code"], Arm.BASELINE),
        (["structured", "structured"], Arm.SPECULATIVE),  # repeated: value by value
        (["open_ended", "structured"], Arm.SPECULATIVE),
        (["open_ended", "unknown"], Arm.BASELINE),
        (["struct ured"], Arm.BASELINE),
        (["unknown"], Arm.BASELINE),
        (["structured" * 1000], Arm.BASELINE),
    ],
)
def test_only_an_exact_speculative_class_value_reaches_the_speculative_arm(
    values: list[str], arm: Arm
) -> None:
    assert ROUTING.arm_for(values) is arm


@pytest.mark.parametrize(
    ("chosen", "line"),
    [
        (["structured"], "-c experiment.routing.speculative_classes=structured"),
        (
            ["structured", "open_ended"],
            "-c experiment.routing.speculative_classes=structured,open_ended",
        ),
        ([], "-c experiment.routing.speculative_classes=[]"),
        (
            ["code"],
            "-c experiment.routing.allowed_classes=structured,open_ended,code "
            "-c experiment.routing.speculative_classes=code",
        ),
    ],
)
def test_the_override_line_enacts_the_decision(chosen: list[str], line: str) -> None:
    routing = build_config({}).routing
    assert routing_override_line(routing, chosen) == line
    # Pasted after the command, the line yields exactly that routing.
    words = shlex.split(line)
    pairs = [word for word in words if word != "-c"]
    applied = build_config(context_from_pairs(pairs)).routing
    assert applied.speculative_classes == chosen
    assert set(chosen) <= set(applied.allowed_classes)


def test_the_override_line_refuses_a_name_that_is_not_a_class() -> None:
    with pytest.raises(ValueError, match="'Open Ended' is not a class name"):
        routing_override_line(build_config({}).routing, ["Open Ended"])


def test_the_override_line_sets_the_floors_of_routed_classes_and_keeps_the_others() -> None:
    routing = build_config({}).routing
    line = routing_override_line(routing, ["code"], {"code": 0.52})
    assert line.endswith("-c experiment.routing.acceptance_floors.code=0.52")
    # A dotted key merges into the mapping: a floor set before, for another class, stays.
    pairs = [word for word in shlex.split(line) if word != "-c"]
    pairs.append("experiment.routing.acceptance_floors.open_ended=0.2")
    applied = build_config(context_from_pairs(pairs)).routing
    assert applied.acceptance_floors == {"code": 0.52, "open_ended": 0.2}
    assert applied.acceptance_floor("code", 0.3) == 0.52


@pytest.mark.parametrize(
    ("floors", "says"),
    [
        ({"open_ended": 0.5}, r"acceptance floors for \['open_ended'\], which the line does not"),
        ({"structured": 0.0}, "not above 0 and at most 1"),
        ({"structured": 1.5}, "not above 0 and at most 1"),
    ],
)
def test_the_override_line_refuses_floors_it_cannot_set(
    floors: dict[str, float], says: str
) -> None:
    with pytest.raises(ValueError, match=says):
        routing_override_line(build_config({}).routing, ["structured"], floors)
