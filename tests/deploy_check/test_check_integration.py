"""``python -m experiment check --local`` end to end on real parts: the local stack's gateway
(a real Envoy rendered from ``routing``, local_run/gateway.py) and Prometheus (Debian's
``prometheus`` evaluating the rendered rule file, local_run/guardrails.py), in front of two
scripted arms that answer vLLM's API (bench/scripted_server.py: /v1/models, streamed
completions, /metrics with vLLM's names) on the ``local.*`` ports, as ``python -m local_run``
lays them out. Starting two real vLLM servers would cost a minute or two of this 2-core
machine for nothing the check reads differently.

- healthy: every HTTP and telemetry check passes, the Kubernetes ones are skipped;
- nothing up but a Prometheus with the rules and no series: the arms and the gateway fail
  with what to start, the series checks fail naming the scrape, the gateway's missing-data
  alert fires and fails the alert check.
"""

from __future__ import annotations

import argparse
import io
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.scripted_server import Script, ScriptedServer
from deploy_check import cli
from experiment import build_config
from experiment.config import Arm, ExperimentConfig
from experiment.loading import context_from_pairs
from loadtest.processes import http_get, poll_until, start_group, stop_groups
from local_run.gateway import local_gateway
from local_run.guardrails import LocalPrometheus, prometheus_binary
from local_run.servers import free_port

pytestmark = [pytest.mark.integration, pytest.mark.process, pytest.mark.timeout(120)]

FAST = [
    "guardrails.live.scrape_interval_s=1",
    "guardrails.live.evaluation_interval_s=1",
    "guardrails.live.window_s=10",
    "guardrails.live.pending_s=0",
    "local.tiered=true",
    "local.guardrails=true",
]


def local_pairs() -> list[str]:
    ports = set()
    while len(ports) < 3:
        ports.add(free_port())
    baseline, speculative, gateway = sorted(ports)
    return [
        *FAST,
        f"local.baseline_port={baseline}",
        f"local.speculative_port={speculative}",
        f"local.gateway_port={gateway}",
    ]


def check(pairs: list[str], prometheus_url: str) -> tuple[int, str]:
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    overrides = [arg for pair in pairs for arg in ("-c", pair)]
    args = parser.parse_args(["--local", *overrides, "--prometheus-url", prometheus_url])
    out = io.StringIO()
    return cli.run(args, out=out), out.getvalue()


def arm_url(config: ExperimentConfig, arm: Arm) -> str:
    port = config.local.baseline_port if arm is Arm.BASELINE else config.local.speculative_port
    return f"http://{config.local.host}:{port}"


@pytest.fixture(scope="module")
def healthy_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[list[str], str]]:
    """Both scripted arms, the gateway and Prometheus, settled (every target scraped once)."""
    pairs = local_pairs()
    config = build_config(context_from_pairs(pairs))
    model = config.serving.target_model
    local = config.local
    baseline = ScriptedServer(Script.fixed(4), model_name=model, port=local.baseline_port)
    # Every chunk 4 tokens, k=3: each draft fully accepted, far above any acceptance floor.
    speculative = ScriptedServer(
        Script.fixed(4, 4), spec_decode_k=3, model_name=model, port=local.speculative_port
    )
    work = tmp_path_factory.mktemp("stack")
    with (
        baseline,
        speculative,
        local_gateway(config, work / "gateway") as gateway,
        LocalPrometheus(
            config, {arm: arm_url(config, arm) for arm in Arm}, gateway.admin_url, work / "prom"
        ) as prometheus,
    ):
        yield pairs, prometheus.url


def test_the_local_stack_passes_every_http_and_telemetry_check(
    healthy_stack: tuple[list[str], str],
) -> None:
    pairs, url = healthy_stack
    code, report = check(pairs, url)
    assert code == 0, report
    assert "✗" not in report
    for arm in Arm:
        assert f"✓ the {arm.value} arm serves Qwen/Qwen3-32B" in report
        assert f"✓ it receives the {arm.value} arm's series" in report
    assert "✓ the gateway answers class structured (rule speculative-0 -> speculative)" in report
    assert "✓ the gateway answers a request without a class" in report
    assert "✓ it receives the gateway's series" in report
    assert "✓ the guardrail rules are loaded (group qwen-sd-guardrails)" in report
    assert "✓ no guardrail alert is firing" in report
    assert "skipped: no probe runs locally" in report
    assert "skipped: --local: the local stack runs no Kubernetes" in report


@pytest.fixture
def empty_prometheus(tmp_path: Path) -> Iterator[tuple[list[str], str]]:
    """A real Prometheus with the local rule file, scraping the ``local.*`` ports where
    nothing listens: no series of any arm or of the gateway."""
    pairs = local_pairs()
    config = build_config(context_from_pairs(pairs))
    admin = f"http://127.0.0.1:{free_port()}"
    files = LocalPrometheus(config, {arm: arm_url(config, arm) for arm in Arm}, admin, tmp_path)
    files.write_files()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with (tmp_path / "prometheus.log").open("wb") as log:
        process: subprocess.Popen[bytes] = start_group(
            [
                prometheus_binary(),
                f"--config.file={files.config_path}",
                f"--storage.tsdb.path={tmp_path / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            log,
        )
        try:
            ready = poll_until(lambda: http_get(f"{url}/-/ready")[0], time.monotonic() + 30, 0.2)
            assert ready, (tmp_path / "prometheus.log").read_text()

            def firing() -> bool:  # the gateway's missing-data alert, at its first evaluation
                return b'"state":"firing"' in http_get(f"{url}/api/v1/alerts")[1]

            assert poll_until(firing, time.monotonic() + 30, 0.2)
            yield pairs, url
        finally:
            stop_groups([process], 5.0)


def test_nothing_up_fails_each_check_with_what_to_change(
    empty_prometheus: tuple[list[str], str],
) -> None:
    pairs, url = empty_prometheus
    code, report = check(pairs, url)
    assert code == 1
    for arm in Arm:
        assert f"✗ the {arm.value} arm serves Qwen/Qwen3-32B" in report
        assert f"✗ it receives the {arm.value} arm's series" in report
        assert f"its {arm.value} server listens on local.{arm.value}_port" in report
    assert "Connection refused" in report
    assert "✓ the Prometheus backend answers queries" in report
    assert "✓ the guardrail rules are loaded (group qwen-sd-guardrails)" in report
    assert "0 target(s) up" in report and "fix: the local Prometheus scrapes http://" in report
    assert "✗ no guardrail alert is firing" in report
    assert "SpecDecodeGatewayMetricsMissing" in report
    assert "fix: each alert says what it saw; docs/guardrails.md" in report
    assert "Status check results are ✗" in report
