"""Synthesized manifests: strict schema validation, shapes that matter, snapshot."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import cdk8s
import kubernetes_validate
import pytest
from workspace import DEPLOY_PINS

from charts import ClusterInputs, build_charts
from charts.loadtest_job import settings_json
from charts.runtime_package import package_files
from experiment import ConfigError, build_config
from experiment.config import Arm
from experiment.loading import context_from_pairs

pytestmark = pytest.mark.infra

CONFIG = build_config({})
# Custom resources are validated against their own CRDs in test_crd_schemas.py.
CRD_KINDS_EXEMPT = {
    "GatewayClass", "Gateway", "HTTPRoute", "EnvoyProxy", "Backend", "BackendTrafficPolicy",
    "AnalysisTemplate", "Rollout",
}  # fmt: skip


def _version() -> str:
    return f"{CONFIG.cluster.kubernetes_version}.0"


def _loadtest_job(documents) -> dict:
    # The serving chart's model-import Job comes first; the load test's is named for it.
    return next(
        d for d in documents if d["kind"] == "Job" and "-loadtest-" in d["metadata"]["name"]
    )


def _pod_template(documents, arm: Arm) -> dict:
    """The arm's pods: the Rollout's template as created (the baseline), or as the canary
    patch turns it (the speculative revision)."""
    if arm == Arm.BASELINE:
        return dict(_find(documents, "Rollout")["spec"]["template"])
    from charts.rollout import canary_patches

    return dict(canary_patches(CONFIG)[0]["spec"]["template"])


def _as_pod(template: dict) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x", **template["metadata"]},
            "spec": template["spec"]}  # fmt: skip


def _find(documents, kind: str, name: str | None = None) -> dict:
    for doc in documents:
        if doc["kind"] == kind and name in (None, doc["metadata"]["name"]):
            return doc
    raise AssertionError(f"no {kind} {name}")


def test_schemas_exist_for_the_configured_version() -> None:
    kubernetes_validate.validate(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}}, _version(), True
    )


def test_every_manifest_passes_strict_validation(documents) -> None:
    checked = 0
    for doc in documents:
        if doc["kind"] in CRD_KINDS_EXEMPT:
            continue
        kubernetes_validate.validate(doc, _version(), strict=True)
        checked += 1
    exempt = [doc for doc in documents if doc["kind"] in CRD_KINDS_EXEMPT]
    assert checked == len(documents) - len(exempt) >= 17
    # Both revisions of the Rollout are core pods too: strict against the cluster's schema.
    for arm in Arm:
        kubernetes_validate.validate(_as_pod(_pod_template(documents, arm)), _version(), True)


def test_strict_validation_catches_a_typo(documents) -> None:
    pod = copy.deepcopy(_as_pod(_pod_template(documents, Arm.BASELINE)))
    pod["spec"]["containers"][0]["resource"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(pod, _version(), strict=True)


def test_resource_claim_template_is_the_ga_shape(documents) -> None:
    template = _find(documents, "ResourceClaimTemplate")
    assert template["apiVersion"] == "resource.k8s.io/v1"
    devices = template["spec"]["spec"]["devices"]
    exactly = devices["requests"][0]["exactly"]
    assert exactly["deviceClassName"] == "neuron.aws.com"
    assert exactly["count"] == CONFIG.serving.neuron_devices == 8
    assert "trn2.48xlarge" in exactly["selectors"][0]["cel"]["expression"]
    assert devices["constraints"][0]["matchAttribute"] == "resource.aws.com/devicegroup8_id"
    assert devices["config"][0]["opaque"]["parameters"]["logicalNeuronCore"] == 2


def test_model_store_volumes(documents) -> None:
    read_only = _find(documents, "PersistentVolume", "qwen-sd-models-ro")["spec"]
    writable = _find(documents, "PersistentVolume", "qwen-sd-compiled-rw")["spec"]
    for pv in (read_only, writable):
        assert pv["csi"]["driver"] == "s3.csi.aws.com"
        assert pv["csi"]["volumeAttributes"]["bucketName"] == "example-model-store"
        assert f"region {CONFIG.region}" in pv["mountOptions"]
        assert pv["storageClassName"] == ""
        assert not {"allow-delete", "allow-overwrite"} & set(pv["mountOptions"])
    assert "read-only" in read_only["mountOptions"]
    assert "prefix compiled/" in writable["mountOptions"]
    assert read_only["csi"]["volumeHandle"] != writable["csi"]["volumeHandle"]


@pytest.mark.parametrize("arm", list(Arm))
def test_serving_pod(documents, arm: Arm) -> None:
    name = CONFIG.serving.service_name(arm)
    pod = _pod_template(documents, arm)["spec"]
    vllm = pod["containers"][0]
    assert vllm["command"][:3] == ["python3", "-m", "runtime.serve"]
    assert vllm["resources"]["claims"] == [{"name": "neuron"}]
    assert vllm["startupProbe"]["failureThreshold"] * vllm["startupProbe"]["periodSeconds"] == (
        CONFIG.serving.startup_timeout_minutes * 60
    )
    assert vllm["readinessProbe"]["httpGet"]["path"] == "/health"
    assert all(m.get("readOnly") for m in vllm["volumeMounts"] if m["name"] == "models")
    assert "compiled" not in {m["name"] for m in vllm["volumeMounts"]}  # writes only in init
    shm = next(v for v in pod["volumes"] if v["name"] == "shm")
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "128Gi"}
    assert pod["tolerations"][0]["key"] == "aws.amazon.com/neuron"
    spec_cm = _find(documents, "ConfigMap", f"{name}-spec")
    assert json.loads(spec_cm["data"]["spec.json"]) == json.loads(
        CONFIG.serving_spec(arm).to_json()
    )
    service = _find(documents, "Service", name)
    assert service["spec"]["ports"][0]["port"] == CONFIG.serving.port
    assert _find(documents, "PodDisruptionBudget", name)["spec"]["minAvailable"] == 1


@pytest.mark.parametrize("arm", list(Arm))
def test_serving_pod_security_defaults_to_strict(documents, arm: Arm) -> None:
    pod = _pod_template(documents, arm)["spec"]
    assert CONFIG.serving.security_profile == "strict"
    assert pod["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}
    for container in [*pod["initContainers"], *pod["containers"]]:
        assert container["securityContext"] == {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
        }
    annotations = _find(documents, "Rollout")["metadata"]["annotations"]
    assert not any("security_profile" in reason for reason in annotations.values())


def test_sample_security_profile_sets_none_on_both_arms_and_says_so_to_checkov() -> None:
    from charts.vllm_service import SAMPLE_PROFILE_FINDINGS, deployment

    sample = build_config({"experiment.serving.security_profile": "sample"})
    deployments = [deployment(sample, arm) for arm in Arm]
    for manifest in deployments:
        pod = manifest["spec"]["template"]["spec"]
        # What the experiment's sample sets: nothing (runtime defaults, no seccomp profile).
        assert pod["securityContext"] == {}
        for container in [*pod["initContainers"], *pod["containers"]]:
            assert container["securityContext"] == {}
        skipped = {value.split("=", 1)[0] for value in manifest["metadata"]["annotations"].values()}
        assert set(SAMPLE_PROFILE_FINDINGS) <= skipped
    first, second = (d["spec"]["template"]["spec"]["securityContext"] for d in deployments)
    assert first == second


def test_security_profile_rejects_an_unknown_name() -> None:
    with pytest.raises(ConfigError, match="security_profile"):
        build_config({"experiment.serving.security_profile": "loose"})


def test_runtime_configmap_is_the_package_source(documents) -> None:
    assert _find(documents, "ConfigMap", "qwen-sd-runtime")["data"] == package_files()
    assert {"__init__.py", "serve.py", "render.py", "spec.py"} <= set(package_files())


def test_loadtest_job(documents) -> None:
    job = _loadtest_job(documents)
    assert job["spec"]["backoffLimit"] == 0
    # The readiness wait, then the comparison (bounded at max_duration_s), then reporting room.
    assert job["spec"]["activeDeadlineSeconds"] == (
        CONFIG.loadtest.wait_ready_s
        + int(CONFIG.loadtest.max_duration_s)
        + CONFIG.loadtest.job_deadline_margin_s
    )
    pod = job["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == CONFIG.loadtest.service_account
    command = pod["containers"][0]["command"]
    assert command[:4] == ["python", "-m", "loadtest", "run"]
    assert command[command.index("--baseline") + 1] == "http://qwen-vllm.qwen.svc:8000"
    assert command[command.index("--speculative") + 1] == "http://qwen-sd-vllm.qwen.svc:8000"
    sa = _find(documents, "ServiceAccount", CONFIG.loadtest.service_account)
    assert sa["metadata"]["namespace"] == CONFIG.serving.namespace


def test_loadtest_job_measures_with_the_synthesized_config(documents, tmp_path) -> None:
    """The Job must not fall back to defaults: a cdk.json override (e.g. the metric
    namespace its IAM condition names) has to reach the container."""
    from loadtest.__main__ import _parser

    job = _loadtest_job(documents)
    pod = job["spec"]["template"]["spec"]
    container = pod["containers"][0]
    command = container["command"]
    config_path = Path(command[command.index("--config") + 1])
    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == str(config_path.parent))
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    data = _find(documents, "ConfigMap", volume["configMap"]["name"])["data"]
    written = tmp_path / config_path.name
    written.write_text(data[config_path.name])
    # The synthesized config: the defaults and the deploy pins python -m charts was given.
    assert build_config({}, config_file=written) == build_config(
        context_from_pairs(DEPLOY_PINS[1::2])
    )
    custom = build_config(
        {"experiment.loadtest.metric_namespace": "Team/SD", "experiment.serving.max_num_seqs": "8"}
    )
    written.write_text(settings_json(custom))
    assert build_config({}, config_file=written) == custom
    # Results go to a writable volume: the image's root filesystem is read-only in the pod.
    out = Path(command[command.index("--out") + 1])
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert any(out.is_relative_to(m["mountPath"]) for m in container["volumeMounts"]
               if not m.get("readOnly"))  # fmt: skip
    assert _parser().parse_args(command[3:]).command == "run"  # the real CLI accepts it


def test_loadtest_pod_size_comes_from_the_config() -> None:
    from charts.loadtest_job import job

    inputs = ClusterInputs(bucket_name="b", loadtest_image="i")
    default = job(CONFIG, inputs)
    sized = job(
        build_config(
            {"experiment.loadtest.pod.cpu_limit": "4", "experiment.loadtest.pod.results_gib": "8"}
        ),
        inputs,
    )
    container = sized["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"] == {
        "requests": {"cpu": "1", "memory": "1Gi"},
        "limits": {"cpu": "4", "memory": "2Gi"},
    }
    volumes = {v["name"]: v for v in sized["spec"]["template"]["spec"]["volumes"]}
    assert volumes["results"]["emptyDir"]["sizeLimit"] == "8Gi"
    # A Job's pod template is immutable: a new size must be a new Job, not a failed patch.
    assert sized["metadata"]["name"] != default["metadata"]["name"]


def test_build_charts_accepts_cdk_tokens() -> None:
    app = cdk8s.App()
    inputs = ClusterInputs(
        bucket_name="${Token[TOKEN.1]}",
        loadtest_image="${Token[TOKEN.2]}",
        prometheus_url="${Token[TOKEN.3]}",
    )
    charts = build_charts(app, CONFIG, inputs)
    assert [c.node.id for c in charts] == ["qwen-sd-serving", "qwen-sd-loadtest", "qwen-sd-routing"]
    text = json.dumps(charts[0].to_json())
    assert "${Token[TOKEN.1]}" in text
    assert "${Token[TOKEN.3]}" in json.dumps(charts[2].to_json())  # the analysis' workspace


def test_plain_yaml_needs_bucket_and_image(tmp_path, capsys) -> None:
    from charts.__main__ import main

    assert main(["--out", str(tmp_path), "--loadtest-image", "x", *DEPLOY_PINS]) == 2
    assert "--bucket" in capsys.readouterr().err
    assert main(["--out", str(tmp_path), "--bucket", "b", *DEPLOY_PINS]) == 2
    assert "--loadtest-image" in capsys.readouterr().err


def test_manifests_snapshot(synthesized, snapshot) -> None:
    # Reviewed by humans: a change here changes what gets deployed. The runtime package
    # source is compared to the files above, not snapshotted (it would churn on every edit);
    # the config checksum annotation hashes it, so it is masked too.
    masked = copy.deepcopy(synthesized)
    for docs in masked.values():
        for doc in docs:
            if doc["metadata"]["name"] == "qwen-sd-runtime":
                doc["data"] = sorted(doc["data"])
            annotations = doc.get("spec", {}).get("template", {}).get("metadata", {})
            if "specdecode.aws/config-checksum" in annotations.get("annotations", {}):
                annotations["annotations"]["specdecode.aws/config-checksum"] = "<masked>"
    assert masked == snapshot
