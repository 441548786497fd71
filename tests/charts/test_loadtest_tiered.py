"""The in-cluster load test drives the tiered gateway as a third arm
(``loadtest.drive_gateway``): the Job passes ``--tiered`` with the gateway's Envoy Service
exactly when asked, and with worker
pods the masters the runner starts on each port are the masters the worker pods serve."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from charts.gateway import gateway_url
from charts.inputs import ClusterInputs
from charts.loadtest_job import (
    TIERED_ON,
    deadline_s,
    loadtest_command,
    loadtest_manifests,
    worker_command,
    worker_sets,
)
from charts.naming import ARM_LABEL
from experiment import build_config
from experiment.config import Arm, ArmsMode, ExperimentConfig
from loadtest import runner
from loadtest.__main__ import _parser
from loadtest.worker_pod import parser as worker_pod_parser

WORKERS = {"experiment.loadtest.workers": "3"}
TIERED = {"experiment.loadtest.drive_gateway": "true"}
SEQUENTIAL = {"experiment.loadtest.arms_mode": "sequential"}
INPUTS = ClusterInputs(bucket_name="b", loadtest_image="123456789012.dkr.ecr.x/loadtest:abc")


def _config(*overrides: dict[str, str]) -> ExperimentConfig:
    merged: dict[str, str] = {}
    for override in overrides:
        merged.update(override)
    return build_config(merged)


@pytest.mark.parametrize("tiered", [False, True])
@pytest.mark.parametrize("mode", ["concurrent", "sequential", "alternating"])
def test_the_job_passes_the_gateway_exactly_when_tiered(tiered: bool, mode: str) -> None:
    config = _config({"experiment.loadtest.arms_mode": mode}, TIERED if tiered else {})
    command = loadtest_command(config)
    args = _parser().parse_args(command[3:])  # the real CLI takes the chart's command
    assert args.tiered == (gateway_url(config) if tiered else None)
    assert command.count("--tiered") == int(tiered)


def test_the_default_job_is_unchanged_by_the_setting() -> None:
    assert build_config({}).loadtest.drive_gateway is False
    assert "--tiered" not in loadtest_command(build_config({}))
    # A Job's pod template is immutable: switching the tiered arm on is a new Job.
    default, tiered = (
        next(d for d in loadtest_manifests(build_config(o), INPUTS) if d["kind"] == "Job")
        for o in ({}, TIERED)
    )
    assert default["metadata"]["name"] != tiered["metadata"]["name"]


def test_the_gateway_url_follows_the_configured_names() -> None:
    config = _config(
        TIERED,
        {
            "experiment.project": "other",
            "experiment.routing.eks.namespace": "eg",
            "experiment.serving.port": "9000",
        },
    )
    assert gateway_url(config) == "http://other-gateway-envoy.eg.svc:9000"
    assert _parser().parse_args(loadtest_command(config)[3:]).tiered == gateway_url(config)


def _arms_per_port(config: ExperimentConfig) -> dict[int, int]:
    return {workers.port: workers.arms for workers in worker_sets(config)}


def test_worker_sets_serve_the_tiered_master_on_the_first_serving_arms_port() -> None:
    concurrent = _config(WORKERS, TIERED)
    assert _arms_per_port(concurrent) == {
        concurrent.loadtest.master_port_of(Arm.BASELINE): 2,  # baseline, then tiered
        concurrent.loadtest.master_port_of(Arm.SPECULATIVE): 1,
    }
    assert _arms_per_port(_config(WORKERS)) == {
        concurrent.loadtest.master_port_of(arm): 1 for arm in Arm
    }
    sequential = _config(WORKERS, TIERED, SEQUENTIAL)
    assert _arms_per_port(sequential) == {sequential.loadtest.master_port: 3}
    assert _arms_per_port(_config(WORKERS, SEQUENTIAL)) == {sequential.loadtest.master_port: 2}
    # The worker pods' own parser reads the count from the chart's command.
    for config in (concurrent, sequential):
        for workers in worker_sets(config):
            args = worker_pod_parser().parse_args(worker_command(config, workers)[3:])
            assert (args.master_port, args.arms) == (workers.port, workers.arms)


@pytest.mark.parametrize("mode", ["concurrent", "sequential"])
def test_the_deadline_counts_one_more_worker_wait_for_the_tiered_master(mode: str) -> None:
    mode_override = {"experiment.loadtest.arms_mode": mode}
    lt = _config(WORKERS, TIERED, mode_override).loadtest
    serving_turns = 1 if mode == "concurrent" else 2
    assert deadline_s(_config(WORKERS, TIERED, mode_override)) == (
        lt.wait_ready_s
        + int(lt.max_duration_s)
        + (serving_turns + 1) * lt.workers_connect_timeout_s
        + lt.job_deadline_margin_s
    )
    # Without worker pods nothing waits for workers: the tiered arm shares max_duration_s.
    assert deadline_s(_config(TIERED, mode_override)) == deadline_s(_config(mode_override))


@pytest.mark.parametrize("mode", ["concurrent", "sequential"])
def test_the_runner_starts_on_each_port_the_masters_its_worker_pods_serve(
    mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """run_comparison as the Job runs it (external workers, the gateway URL), with Locust
    replaced by a recorder: per master port, as many masters as that port's worker pods
    serve (``--arms``); as many worker waits in turn as the deadline allows; and the arms'
    time bounds in turn add up to no more than ``max_duration_s``."""
    config = _config(WORKERS, TIERED, {"experiment.loadtest.arms_mode": mode})
    turns: list[list[tuple[str, int, float]]] = []

    def record(plans, _out_dir, ports, *, workers, local_workers, config):
        assert (workers, local_workers) == (3, False)
        masters = [
            (p.arm, port, p.shape.max_duration_s) for p, port in zip(plans, ports, strict=True)
        ]
        # Sequential: each master is a turn of its own; concurrent: they share one.
        turns.extend(
            [[m] for m in masters] if config.arms_mode is ArmsMode.SEQUENTIAL else [masters]
        )

    monkeypatch.setattr(runner, "run_arms", record)
    monkeypatch.setattr(runner, "check_ports_free", lambda ports: None)  # no sockets here
    monkeypatch.setattr(runner, "write_report", lambda *args, **kwargs: None)
    command = _parser().parse_args(loadtest_command(config)[3:])
    runner.run_comparison(
        config, command.baseline, command.speculative, tmp_path,
        local_workers=not command.workers_external, tiered_url=command.tiered,
    )  # fmt: skip
    masters = [master for turn in turns for master in turn]
    assert [arm for arm, _, _ in masters][-1] == "tiered"  # after the serving arms
    assert Counter(port for _, port, _ in masters) == _arms_per_port(config)
    tiered_port = next(port for arm, port, _ in masters if arm == "tiered")
    assert tiered_port == config.loadtest.master_port_of(TIERED_ON)
    lt = config.loadtest
    waits = (deadline_s(config) - lt.wait_ready_s - int(lt.max_duration_s)
             - lt.job_deadline_margin_s) // lt.workers_connect_timeout_s  # fmt: skip
    assert waits == len(turns)
    assert sum(max(bound for _, _, bound in turn) for turn in turns) <= lt.max_duration_s


def test_the_tiered_master_needs_no_port_or_worker_job_of_its_own() -> None:
    for mode in ({}, SEQUENTIAL):
        config = _config(WORKERS, TIERED, mode)
        plain = _config(WORKERS, mode)
        docs, plain_docs = (loadtest_manifests(c, INPUTS) for c in (config, plain))
        (service,) = [d for d in docs if d["kind"] == "Service"]
        (plain_service,) = [d for d in plain_docs if d["kind"] == "Service"]
        assert service["spec"]["ports"] == plain_service["spec"]["ports"]
        jobs = [d for d in docs if d["kind"] == "Job"]
        assert len(jobs) == len([d for d in plain_docs if d["kind"] == "Job"])
        arms = {j["spec"]["template"]["metadata"]["labels"].get(ARM_LABEL) for j in jobs[1:]}
        assert arms == ({None} if mode else {arm.value for arm in Arm})
