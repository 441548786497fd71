"""A replayed traffic file on the cluster: the load-test Job's master copies it from the
model-store bucket (``--traffic-bucket``, the bucket from its env), its workers never see it,
and without a traffic file the Job is as before."""

from __future__ import annotations

from charts.inputs import ClusterInputs
from charts.loadtest_job import TRAFFIC_BUCKET_ENV, loadtest_command, loadtest_manifests
from experiment import build_config
from loadtest.__main__ import _parser

INPUTS = ClusterInputs(bucket_name="model-bucket", loadtest_image="img@sha256:" + "0" * 64)
TRAFFIC = {"experiment.loadtest.traffic.file": "runs/pilot/traffic.jsonl"}


def _pods(overrides: dict[str, str]) -> dict[str, dict]:
    jobs = [m for m in loadtest_manifests(build_config(overrides), INPUTS) if m["kind"] == "Job"]
    return {j["metadata"]["name"]: j["spec"]["template"]["spec"] for j in jobs}


def test_the_master_copies_the_traffic_file_from_the_bucket_named_in_its_env() -> None:
    config = build_config(TRAFFIC)
    command = loadtest_command(config)
    assert command[command.index("--traffic-bucket") + 1] == f"$({TRAFFIC_BUCKET_ENV})"
    assert _parser().parse_args(command[3:]).traffic_bucket == f"$({TRAFFIC_BUCKET_ENV})"
    pods = _pods({**TRAFFIC, "experiment.loadtest.workers": "2"})
    master = next(p for n, p in pods.items() if "workers" not in n)
    env = {e["name"]: e["value"] for e in master["containers"][0]["env"]}
    assert env[TRAFFIC_BUCKET_ENV] == INPUTS.bucket_name
    for name, pod in pods.items():
        if "workers" in name:  # the plan reaches workers from the master, not the file
            assert TRAFFIC_BUCKET_ENV not in {e["name"] for e in pod["containers"][0]["env"]}


def test_without_a_traffic_file_the_job_neither_copies_nor_names_the_bucket() -> None:
    assert "--traffic-bucket" not in loadtest_command(build_config({}))
    for pod in _pods({}).values():
        assert TRAFFIC_BUCKET_ENV not in {e["name"] for e in pod["containers"][0]["env"]}
