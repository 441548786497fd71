"""The model-import Job, its volume and NetworkPolicy, and the serving pods' wait for it."""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path, PurePosixPath

import kubernetes_validate
import pytest

from charts.app import shared_manifests
from charts.inputs import ClusterInputs
from charts.model_import_job import (
    CHECKPOINTS_DIR,
    imported_models,
    model_import_manifests,
)
from charts.vllm_service import arm_manifests
from experiment import build_config
from experiment.config import Arm, ExperimentConfig
from runtime.model_import import _awaited_directories, argument_parser

pytestmark = pytest.mark.infra  # renders the cdk8s charts, validated by kubernetes-validate

CONFIG = build_config({})
INPUTS = ClusterInputs(bucket_name="example-model-store", loadtest_image="image")


def _by_kind(config: ExperimentConfig) -> dict[str, dict]:
    return {doc["kind"]: doc for doc in model_import_manifests(config, INPUTS.bucket_name)}


def _pod(config: ExperimentConfig) -> dict:
    return _by_kind(config)["Job"]["spec"]["template"]["spec"]


def _command(config: ExperimentConfig) -> list[str]:
    return _pod(config)["containers"][0]["command"]


def _options(command: list[str]):
    assert command[:3] == ["python3", "-m", "runtime.model_import"]
    return argument_parser().parse_args(command[3:])  # the real CLI accepts it


def test_the_job_is_bounded_and_retried_only_as_configured() -> None:
    job = _by_kind(CONFIG)["Job"]
    assert job["spec"]["activeDeadlineSeconds"] == CONFIG.model_store.import_timeout_minutes * 60
    assert job["spec"]["backoffLimit"] == CONFIG.model_store.import_retries == 2
    options = _options(_command(CONFIG))
    assert options.timeout_s == job["spec"]["activeDeadlineSeconds"]
    custom = build_config(
        {"experiment.model_store.import_timeout_minutes": "30",
         "experiment.model_store.import_retries": "0"}
    )  # fmt: skip
    assert _by_kind(custom)["Job"]["spec"]["activeDeadlineSeconds"] == 1800
    assert _by_kind(custom)["Job"]["spec"]["backoffLimit"] == 0
    # A Job's pod template is immutable: other settings give another Job name.
    assert _by_kind(custom)["Job"]["metadata"]["name"] != job["metadata"]["name"]


def test_it_imports_the_target_and_the_draft_from_the_configured_hub() -> None:
    options = _options(_command(CONFIG))
    assert options.command == "import"
    assert options.endpoint == "https://huggingface.co"
    assert options.model == ["Qwen/Qwen3-32B", "Qwen/Qwen3-1.7B"]
    assert options.dest == CHECKPOINTS_DIR


def test_candidate_drafts_and_pinned_revisions_are_imported() -> None:
    config = build_config(
        {
            "experiment.tuning.deploy": "true",
            "experiment.cluster.neuron_nodes.max_size": "9",
            "experiment.model_store.hub_revisions.Qwen/Qwen3-32B": "9216db5",
        }
    )
    models = imported_models(config)
    assert models[:2] == ["Qwen/Qwen3-32B", "Qwen/Qwen3-1.7B"]
    assert set(config.tuning.drafts) <= set(models) and len(models) == len(set(models))
    assert _options(_command(config)).model[0] == "Qwen/Qwen3-32B@9216db5"


def test_no_token_anywhere_without_a_secret_and_only_a_file_with_one() -> None:
    pod = _pod(CONFIG)
    assert "--token-file" not in _command(CONFIG)
    assert not any("secret" in volume for volume in pod["volumes"])
    config = build_config({"experiment.model_store.hub_token_secret": "hub-token"})
    pod = _pod(config)
    options = _options(_command(config))
    secret = next(v for v in pod["volumes"] if "secret" in v)
    assert secret["secret"] == {
        "secretName": "hub-token",
        "items": [{"key": "token", "path": "token"}],
        "optional": True,
    }
    mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == secret["name"])
    assert mount["readOnly"] is True
    assert Path(options.token_file) == Path(mount["mountPath"]) / "token"
    # The token reaches the pod only as that file: no environment variable, no literal.
    assert all("valueFrom" not in env for env in pod["containers"][0]["env"])


def test_the_volume_writes_only_checkpoints_with_the_pods_own_role() -> None:
    docs = model_import_manifests(CONFIG, INPUTS.bucket_name)
    pv = next(d for d in docs if d["kind"] == "PersistentVolume")["spec"]
    pvc = next(d for d in docs if d["kind"] == "PersistentVolumeClaim")
    assert pv["csi"]["volumeAttributes"] == {
        "bucketName": "example-model-store",
        "authenticationSource": "pod",  # the Job's Pod Identity role, not the driver's
    }
    assert "prefix checkpoints/" in pv["mountOptions"]
    assert "allow-delete" in pv["mountOptions"]  # a damaged file is replaced
    assert "allow-overwrite" not in pv["mountOptions"]
    user = _pod(CONFIG)["securityContext"]["runAsUser"]
    assert {f"uid {user}", f"gid {user}"} <= set(pv["mountOptions"])
    assert pv["claimRef"] == {"namespace": "qwen", "name": pvc["metadata"]["name"]}
    pod = _pod(CONFIG)
    assert pod["serviceAccountName"] == CONFIG.model_store.import_service_account
    assert _by_kind(CONFIG)["ServiceAccount"]["metadata"]["name"] == pod["serviceAccountName"]


def test_the_network_policy_allows_dns_and_public_https_only() -> None:
    policy = _by_kind(CONFIG)["NetworkPolicy"]["spec"]
    assert (
        policy["podSelector"]["matchLabels"]
        == _by_kind(CONFIG)["Job"]["spec"]["template"]["metadata"]["labels"]
    )
    assert policy["policyTypes"] == ["Ingress", "Egress"] and policy["ingress"] == []
    dns, https = policy["egress"]
    assert {p["port"] for p in dns["ports"]} == {53}
    assert dns["to"][0]["podSelector"]["matchLabels"] == {"k8s-app": "kube-dns"}
    assert https["ports"] == [{"protocol": "TCP", "port": 443}]
    block = https["to"][0]["ipBlock"]
    excluded = [ipaddress.ip_network(cidr) for cidr in block["except"]]
    for address in ("169.254.169.254", "169.254.170.23", "10.42.0.10", "172.20.0.10"):
        # instance metadata, the Pod Identity agent, the VPC, the cluster's services
        assert any(ipaddress.ip_address(address) in net for net in excluded), address
    assert not any(ipaddress.ip_address("18.164.0.1") in net for net in excluded)  # a CDN


def test_a_public_vpc_range_is_excluded_too() -> None:
    config = build_config({"experiment.network.vpc_cidr": "198.18.0.0/16"})
    block = _by_kind(config)["NetworkPolicy"]["spec"]["egress"][1]["to"][0]["ipBlock"]
    assert "198.18.0.0/16" in block["except"]


@pytest.mark.parametrize("arm", list(Arm))
def test_serving_pods_wait_for_their_models_before_precompiling(arm: Arm) -> None:
    deployment = next(d for d in arm_manifests(CONFIG, arm) if d["kind"] == "Deployment")
    inits = deployment["spec"]["template"]["spec"]["initContainers"]
    assert [c["name"] for c in inits] == ["wait-checkpoints", "precompile"]
    options = _options(inits[0]["command"])
    assert options.command == "wait"
    assert options.timeout_s == CONFIG.model_store.import_timeout_minutes * 60
    # It waits for exactly the directories its spec loads, which are where the import's
    # checkpoints/ volume puts each imported model.
    spec = json.loads(CONFIG.serving_spec(arm).to_json())
    assert options.spec.endswith("spec.json")
    awaited = _awaited_directories(spec)
    assert len(awaited) == (2 if arm == Arm.SPECULATIVE else 1)
    models_root = PurePosixPath(CONFIG.model_store.mount_path) / "checkpoints"
    for directory in awaited:
        model = str(PurePosixPath(directory).relative_to(models_root))
        assert model in imported_models(CONFIG)
    mounts = {m["name"]: m for m in inits[0]["volumeMounts"]}
    assert mounts["models"]["readOnly"] is True and "compiled" not in mounts


def test_without_the_import_there_is_no_job_and_no_wait() -> None:
    config = build_config({"experiment.model_store.import_checkpoints": "false"})
    assert model_import_manifests(config, INPUTS.bucket_name) == []
    deployment = next(d for d in arm_manifests(config, Arm.BASELINE) if d["kind"] == "Deployment")
    names = [c["name"] for c in deployment["spec"]["template"]["spec"]["initContainers"]]
    assert names == ["precompile"]


def test_every_persistent_volume_is_reserved_for_its_claim() -> None:
    docs = shared_manifests(CONFIG, INPUTS)
    claims = {
        (d["metadata"]["namespace"], d["metadata"]["name"]): d
        for d in docs
        if d["kind"] == "PersistentVolumeClaim"
    }
    volumes = [d for d in docs if d["kind"] == "PersistentVolume"]
    assert len(volumes) == 3
    for pv in volumes:
        ref = pv["spec"]["claimRef"]
        claim = claims[(ref["namespace"], ref["name"])]
        assert claim["spec"]["volumeName"] == pv["metadata"]["name"]


def test_the_manifests_pass_strict_schemas_with_every_option() -> None:
    config = build_config(
        {
            "experiment.model_store.hub_token_secret": "hub-token",
            "experiment.tuning.deploy": "true",
            "experiment.cluster.neuron_nodes.max_size": "9",
        }
    )
    version = f"{config.cluster.kubernetes_version}.0"
    for doc in model_import_manifests(config, INPUTS.bucket_name):
        kubernetes_validate.validate(doc, version, strict=True)
