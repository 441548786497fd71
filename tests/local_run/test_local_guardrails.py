"""The local Prometheus (local_run/guardrails.py): a real ``prometheus`` scraping two scripted
arms (bench's scripted server, its ``/metrics``) and the real Envoy gateway, evaluating the
rendered rule file; and the ``local.guardrails`` setting.

Real vLLM servers are the drill's (test_guardrails_drill.py); here the scrape, the labels and
the missing-data rule are checked in seconds.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml
from gateway_harness import ScriptedArm, gateway_between, send

from bench.scripted_server import Script
from experiment import build_config
from experiment.config import Arm
from experiment.loading import context_from_pairs
from guardrails.rules import rule_set
from local_run.gateway import Address
from local_run.guardrails import (
    CONFIG_FILE,
    RULE_FILE,
    AlertLog,
    LocalPrometheus,
    without_probe,
)
from local_run.servers import ServerError, free_port
from runtime.spec import Generation

FAST = [
    "guardrails.live.scrape_interval_s=1",
    "guardrails.live.evaluation_interval_s=1",
    "guardrails.live.window_s=10",
    "guardrails.live.pending_s=0",
]


def test_guardrails_need_the_tiered_gateway() -> None:
    with pytest.raises(ValueError, match=r"local\.tiered=true"):
        build_config(context_from_pairs(["local.guardrails=true"]))
    config = build_config(context_from_pairs(["local.guardrails=true", "local.tiered=true"]))
    assert config.local.guardrails
    assert build_config({}).local.guardrails is False


@pytest.mark.integration
@pytest.mark.process
@pytest.mark.timeout(120)
def test_prometheus_watches_both_arms_and_the_gateway(tmp_path: Path) -> None:
    config = build_config(context_from_pairs([*FAST, "local.tiered=true"]))
    routing = config.routing
    arms = {
        Arm.BASELINE: ScriptedArm(free_port(), Script.fixed(8)),
        Arm.SPECULATIVE: ScriptedArm(free_port(), Script.fixed(8, 2), spec_decode_k=3),
    }
    try:
        for arm in arms.values():
            arm.start()
        servers = {arm: scripted.url for arm, scripted in arms.items()}
        addresses = Address.of_url(servers[Arm.BASELINE]), Address.of_url(servers[Arm.SPECULATIVE])
        with (
            gateway_between(routing, *addresses, tmp_path / "gateway") as gateway,
            LocalPrometheus(config, servers, gateway.admin_url, tmp_path / "prom") as prom,
        ):
            # What it evaluates is the rendered rule set, written beside its configuration.
            rules = rule_set(without_probe(config), Generation.LOCAL_CPU).prometheus()
            assert "SpecDecodeProbeMissing" not in str(rules)  # no probe runs locally
            assert yaml.safe_load((tmp_path / "prom" / RULE_FILE).read_text()) == rules
            scrape = yaml.safe_load((tmp_path / "prom" / CONFIG_FILE).read_text())
            assert scrape["rule_files"] == [RULE_FILE]
            assert all(prom.targets_up().values()) and len(prom.targets_up()) == 3
            # Idle arms are no fault: nothing fires once every target is scraped.
            watch = AlertLog(prom)
            assert watch.poll() == []
            # A request through each rule: the gateway's series carry the rule's name.
            assert send(gateway.url, [(routing.class_header, "structured")]).ok
            assert send(gateway.url, []).ok
            time.sleep(2 * config.guardrails.live.scrape_interval_s + 0.5)
            routes = {
                sample["metric"]["route"]: float(sample["value"][1])
                for sample in prom.query("envoy_cluster_upstream_rq_total")
            }
            assert routes == {routing.rule_name("structured"): 1.0, routing.rule_name(None): 1.0}
            arm_labels = {s["metric"]["arm"] for s in prom.query("vllm:num_requests_running")}
            assert arm_labels == {Arm.BASELINE.value, Arm.SPECULATIVE.value}
            assert watch.poll() == []
            # The speculative server dies: its metrics go missing, which fires.
            arms[Arm.SPECULATIVE].kill()
            deadline = time.monotonic() + 10 * config.guardrails.live.evaluation_interval_s
            fired: list[str] = []
            while time.monotonic() < deadline and not fired:
                fired = [a.name for a in watch.poll() if a.labels.get("arm") == "speculative"]
                time.sleep(0.25)
            assert fired == ["SpecDecodeArmMetricsMissing"]
        assert prom.process is None
    finally:
        for arm in arms.values():
            arm.kill()


class _SlowFirstScrape(LocalPrometheus):
    """Every target first reported up ``first_up_s`` after the settle starts, as Prometheus
    does for a target whose scrape offset falls late in its interval."""

    first_up_s: float = 0.0
    began: float = 0.0

    def targets_up(self) -> dict[str, bool]:
        up = time.monotonic() - self.began >= self.first_up_s
        return {"baseline": up, "speculative": up}


@pytest.mark.parametrize(("first_up_s", "settles"), [(0.8, True), (5.0, False)])
def test_the_settle_waits_a_scrape_interval_beyond_the_ready_timeout(
    tmp_path: Path, first_up_s: float, settles: bool
) -> None:
    """A first scrape can come a whole interval after the start: the settle allows the
    interval (1 s here) on top of the ready timeout (0.3 s), and no longer (without it, a
    30 s interval failed `make local` with the guardrails on)."""
    pairs = ["guardrails.live.evaluation_interval_s=1", "guardrails.live.scrape_interval_s=1"]
    config = build_config(context_from_pairs(pairs))
    servers = {Arm.BASELINE: "http://a", Arm.SPECULATIVE: "http://b"}
    prom = _SlowFirstScrape(config, servers, None, tmp_path, ready_timeout_s=0.3)
    prom.first_up_s, prom.began = first_up_s, time.monotonic()
    if settles:
        prom._settle()
    else:
        with pytest.raises(ServerError, match="cannot scrape every target"):
            prom._settle()
        assert time.monotonic() - prom.began < 2.0
