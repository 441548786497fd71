"""The load-test Job starts only once each compared arm's Service reaches its own revision
of the Rollout, and only its wait holds a Kubernetes API credential, scoped to what it reads."""

from __future__ import annotations

import pytest

from charts.inputs import ClusterInputs
from charts.loadtest_job import API_TOKEN_DIR, arms_routed_access, loadtest_manifests
from charts.rollout import rollout_name
from experiment import build_config
from experiment.config import Arm

INPUTS = ClusterInputs(bucket_name="bucket", loadtest_image="image:tag")


def _pods(config) -> dict[str, dict]:
    """Job name -> its pod spec."""
    return {
        m["metadata"]["name"]: m["spec"]["template"]["spec"]
        for m in loadtest_manifests(config, INPUTS)
        if m["kind"] == "Job"
    }


@pytest.mark.parametrize("workers", ["1", "3"])
def test_the_master_waits_for_both_arms_routed_before_it_measures(workers: str) -> None:
    config = build_config({"experiment.loadtest.workers": workers})
    pods = _pods(config)
    masters = [p for p in pods.values() if "initContainers" in p]
    assert len(masters) == 1  # workers need no wait: they follow their master
    (wait,) = masters[0]["initContainers"]
    command = wait["command"]
    assert command[:3] == ["python", "-m", "runtime.arms_routed"]
    options = dict(zip(command[3::2], command[4::2], strict=True))
    assert options == {
        "--namespace": config.serving.namespace,
        "--rollout": rollout_name(config),
        "--baseline-service": config.serving.service_name(Arm.BASELINE),
        "--speculative-service": config.serving.service_name(Arm.SPECULATIVE),
        "--timeout-s": str(config.loadtest.wait_ready_s),
    }


def test_only_the_wait_holds_an_api_token_and_it_may_only_read_the_arms() -> None:
    config = build_config({})
    (pod,) = _pods(config).values()
    assert pod["automountServiceAccountToken"] is False
    (wait,) = pod["initContainers"]
    assert wait["volumeMounts"] == [
        {"name": "kube-api-access", "mountPath": API_TOKEN_DIR, "readOnly": True}
    ]
    for container in pod["containers"]:
        assert "kube-api-access" not in {m["name"] for m in container["volumeMounts"]}
    role, binding = arms_routed_access(config)
    assert all(rule["verbs"] == ["get"] for rule in role["rules"])
    assert {name for rule in role["rules"] for name in rule["resourceNames"]} == {
        rollout_name(config),
        *(config.serving.service_name(arm) for arm in Arm),
    }
    assert binding["subjects"][0]["name"] == config.loadtest.service_account
