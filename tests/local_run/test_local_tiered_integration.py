"""Integration tier: the tiered arm on real vLLM (CPU) servers behind the real Envoy gateway.

A small local comparison drives the gateway as the third arm: it serves every request,
reproduces the baseline's greedy outputs exactly, sends exactly the speculative classes'
requests to the speculative server (Envoy's own counters), and the summary reports it per
class against both arms with paired intervals.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from experiment.config import TIERED_ARM, Arm, ExperimentConfig
from loadtest import RunSummary, run_comparison
from loadtest.plan import local_scale
from loadtest.prompts import load_prompts
from loadtest.records import read_records
from local_run.gateway import Address, EnvoyGateway, EnvoyMeter, envoy_bootstrap
from local_run.run import _problems
from local_run.servers import free_port

pytestmark = [pytest.mark.integration, pytest.mark.process, pytest.mark.timeout(600)]
SUMMARY_SCHEMA = Path(__file__).resolve().parents[2] / "docs" / "schemas" / "summary.schema.json"


@pytest.fixture(scope="module")
def gateway(
    local_config: ExperimentConfig, running_servers: dict[Arm, str], tmp_path_factory: Any
) -> Iterator[EnvoyGateway]:
    bootstrap = envoy_bootstrap(
        local_config.routing,
        listen=Address(local_config.local.host, free_port()),
        baseline=Address.of_url(running_servers[Arm.BASELINE]),
        speculative=Address.of_url(running_servers[Arm.SPECULATIVE]),
        admin=Address("127.0.0.1", 0),
    )
    with EnvoyGateway(bootstrap, tmp_path_factory.mktemp("gateway")) as running:
        yield running


@pytest.fixture(scope="module")
def tiered_dir(
    local_config: ExperimentConfig,
    running_servers: dict[Arm, str],
    gateway: EnvoyGateway,
    tmp_path_factory: Any,
) -> Path:
    run_dir = tmp_path_factory.mktemp("tiered")
    run_comparison(
        local_scale(local_config),
        running_servers[Arm.BASELINE],
        running_servers[Arm.SPECULATIVE],
        run_dir,
        local=True,
        tiered_url=gateway.url,
        # The servers here are not pinned (their cores are not the gateway's concern here).
        gateway_meter=EnvoyMeter(gateway, {}, sorted(os.sched_getaffinity(0))),
    )
    return run_dir


@pytest.fixture(scope="module")
def tiered_summary(tiered_dir: Path) -> RunSummary:
    text = (tiered_dir / "summary.json").read_text()
    jsonschema.validate(json.loads(text), json.loads(SUMMARY_SCHEMA.read_text()))
    return RunSummary.model_validate_json(text)


def test_the_tiered_arm_serves_every_request_losslessly(
    tiered_summary: RunSummary, local_config: ExperimentConfig
) -> None:
    prompts = load_prompts(local_config.loadtest.prompts.files)
    expected = len(prompts) * local_config.local.requests_per_prompt
    for name, arm in tiered_summary.arms.items():
        assert arm.overall.requests == arm.overall.succeeded == expected, name
        assert arm.overall.failed == 0 and arm.stopped_by == "schedule_done", name
    tiered = tiered_summary.tiered
    assert tiered is not None
    assert tiered.lossless.prompts_compared == len(prompts)
    assert tiered.lossless.exact_match_rate == 1.0, tiered.lossless.mismatches
    assert tiered.unpaired == 0
    assert _problems(tiered_summary) == []


def test_the_gateway_sent_exactly_the_speculative_classes_to_sd(
    tiered_dir: Path, gateway: EnvoyGateway, local_config: ExperimentConfig
) -> None:
    records = read_records(tiered_dir / f"records_{TIERED_ARM}.jsonl")
    speculative = local_config.routing.speculative_classes
    to_sd = sum(1 for r in records if r.prompt_class in speculative)  # warm-ups included
    assert 0 < to_sd < len(records)
    # Each rule's cluster carries its name (envoyproxy/envoy docs/root/configuration/upstream/
    # cluster_manager/cluster_stats.rst: cluster.<name>.upstream_rq_total, upstream_rq_retry);
    # which arm served, per host (admin /clusters).
    routing = local_config.routing
    (rule,) = (routing.rule_name(name) for name in speculative)
    other = routing.rule_name(None)
    stats = gateway.stats()
    assert stats[f"cluster.{rule}.upstream_rq_total"] == to_sd
    assert stats[f"cluster.{rule}.upstream_rq_retry"] == 0
    served = gateway.arm_requests()
    assert served[(rule, Arm.SPECULATIVE.value)] == to_sd
    assert served[(rule, Arm.BASELINE.value)] == 0
    # The rest, plus the load test's /health and /metrics reads (the catch-all route).
    assert served[(other, Arm.BASELINE.value)] >= len(records) - to_sd


def test_the_summary_reports_tiered_per_class_against_both_arms(
    tiered_summary: RunSummary, tiered_dir: Path, local_config: ExperimentConfig
) -> None:
    tiered = tiered_summary.tiered
    assert tiered is not None
    prompts = load_prompts(local_config.loadtest.prompts.files)
    per_class = Counter(p.prompt_class for p in prompts)
    assert set(tiered.by_class) == set(per_class) == {"structured", "open_ended"}
    for name, check in tiered.by_class.items():
        routed = (
            Arm.SPECULATIVE if name in local_config.routing.speculative_classes else Arm.BASELINE
        )
        assert check.routed_to == routed.value
        pairs = per_class[name] * local_config.local.requests_per_prompt
        assert check.vs_baseline.n == check.vs_speculative.n == pairs
        for interval in (check.vs_baseline, check.vs_speculative):
            assert interval.low is not None and interval.high is not None
            assert interval.low <= interval.estimate <= interval.high
        assert check.held is not None, check.reason  # enough pairs to decide
    # The miniature drafts structured prompts well: routed to SD, they beat the baseline.
    structured = tiered.by_class["structured"]
    assert structured.speculative_vs_baseline is not None
    assert structured.vs_baseline.estimate > 1.0
    report = (tiered_dir / "report.md").read_text()
    assert "## Tiered arm: per class vs baseline and SD" in report


def test_the_gateways_own_cost_is_measured_around_the_tiered_arm(
    tiered_summary: RunSummary, tiered_dir: Path
) -> None:
    assert tiered_summary.tiered is not None
    cost = tiered_summary.tiered.gateway
    assert cost is not None
    records = read_records(tiered_dir / f"records_{TIERED_ARM}.jsonl")
    # Every tiered request (warm-ups included), plus the load test's /health and /metrics
    # reads through the catch-all route.
    assert cost.requests >= len(records)
    assert cost.cpu_s > 0 and cost.cpu_ms_per_request is not None
    assert cost.added_ms_per_request is not None and cost.added_ms_per_request >= 0
    assert "gateway cost during the tiered arm" in (tiered_dir / "report.md").read_text()


def test_the_deploy_check_passes_its_http_checks_on_the_real_stack(
    local_config: ExperimentConfig,
    running_servers: dict[Arm, str],
    gateway: EnvoyGateway,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``python -m experiment check --local`` against real vLLM servers behind the real
    Envoy: both arms serve the configured model and the gateway answers every class on its
    route (its telemetry checks run on a real Prometheus in tests/deploy_check)."""
    from experiment.__main__ import main

    gateway_port = int(gateway.url.rsplit(":", 1)[1])
    pairs = {
        "local.baseline_port": local_config.local.baseline_port,
        "local.speculative_port": local_config.local.speculative_port,
        "local.gateway_port": gateway_port,
        "local.tiered": "true",
    }
    argv = ["check", "--local"]
    for key, value in pairs.items():
        argv += ["-c", f"{key}={value}"]
    code = main(argv)
    out = capsys.readouterr().out
    assert code == 0, out
    assert "✗" not in out
    checked = [line for line in out.splitlines() if line.startswith("✓")]
    model = local_config.serving.target_model
    for arm in Arm:
        assert any(arm.value in line and model in line for line in checked), out
    for name in local_config.routing.allowed_classes:
        assert any(name in line for line in checked), (name, out)
