"""The Kubernetes checks of ``python -m experiment check`` (deploy_check/kube.py, and the
command's cluster path in deploy_check/cli.py) over the client's own models, deserialized
as the client deserializes an API answer from ``kubectl get -o json``-shaped fixtures
(tests/deploy_check/check_fixtures/): a Ready trn2 node and a NotReady one, the Neuron
driver's ResourceSlice, allocated and pending ResourceClaims, the serving pods (Ready, and
one in its precompile init container), complete, running and failed Jobs, a Rollout with a
canary, its AnalysisRun Running and Failed, the arms' Services and the gateway's Envoy.

Every check passes on the healthy objects and fails, saying what to change, on unhealthy
ones. Marked ``infra``: the models are the ``kubernetes`` client's (the infra extra)."""

from __future__ import annotations

import argparse
import copy
import io
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from check_fakes import FakeEndpoint, completion_stream, models_reply

from deploy_check import cli, kube
from deploy_check.http import COMPLETIONS_PATH, MODELS_PATH, Endpoint
from deploy_check.kube import KubeError
from deploy_check.model import Group, Status
from experiment import build_config
from experiment.config import Arm, ExperimentConfig
from experiment.loading import context_from_pairs

pytestmark = pytest.mark.infra

FIXTURES = Path(__file__).with_name("check_fixtures")
CONFIG = build_config({})
NAMESPACE = CONFIG.serving.namespace
MODEL = CONFIG.serving.target_model
# The deploy pins a cluster check's configuration needs (placeholders of the right form, as
# tests/charts/workspace.py passes them to python -m charts).
PINS = [
    "-c", "routing.eks.gateway_api_plugin_sha256=" + "0" * 64,
    "-c", "cluster.s3_csi_addon_version=v2.1.0-eksbuild.1",
    "-c", "cluster.cloudwatch_addon_version=v4.1.0-eksbuild.1",
    "-c", "model_store.hub_revisions="
    + json.dumps({"Qwen/Qwen3-32B": "1" * 40, "Qwen/Qwen3-1.7B": "2" * 40}),
]  # fmt: skip


def fixture(file: str, **metadata: str) -> dict[str, Any]:
    """A fixture as JSON, with ``metadata`` fields replaced (e.g. the config's own names)."""
    obj = json.loads((FIXTURES / f"{file}.json").read_text())
    obj["metadata"].update(metadata)
    return obj


def model(obj: Mapping[str, Any], kind: str) -> Any:
    """``obj`` as the client turns an API answer into its model."""
    from kubernetes.client import ApiClient

    return ApiClient().deserialize(json.dumps(obj), kind, "application/json")


def node(ready: bool = True) -> Any:
    return model(fixture("node-trn2-ready" if ready else "node-trn2-notready"), "V1Node")


def resource_slice(devices: int = 16) -> Any:
    obj = fixture("resourceslice-neuron")
    obj["spec"]["devices"] = obj["spec"]["devices"][:devices]
    return model(obj, "V1ResourceSlice")


def pod(name: str) -> Any:
    return model(fixture(name), "V1Pod")


def claim_for(pod_model: Any, allocated: bool = True) -> Any:
    (status,) = pod_model.status.resource_claim_statuses
    base = "resourceclaim-allocated" if allocated else "resourceclaim-pending"
    return model(fixture(base, name=status.resource_claim_name), "ResourceV1ResourceClaim")


def job(file: str, config: ExperimentConfig, kind: str) -> Any:
    job_name = (
        kube.model_import_job_name(config) if kind == "import" else kube.loadtest_job_name(config)
    )
    return model(fixture(file, name=job_name), "V1Job")


def labels_match(obj: Any, selector: str) -> bool:
    labels = (obj.metadata.labels or {}) if obj.metadata else {}
    wanted = dict(pair.split("=", 1) for pair in selector.split(",") if pair)
    return all(labels.get(key) == value for key, value in wanted.items())


@dataclass
class FakeReader:
    """``KubeReader`` over a fixed set of models; lists filter by label as the API does.
    ``replies``: each pod's answers (by pod name) through its fake port-forward."""

    nodes_: list[Any] = field(default_factory=list)
    slices: list[Any] = field(default_factory=list)
    pods_: list[Any] = field(default_factory=list)
    claims: dict[str, Any] = field(default_factory=dict)
    jobs_: list[Any] = field(default_factory=list)
    services: dict[tuple[str, str], Any] = field(default_factory=dict)
    rollouts: dict[str, dict[str, Any]] = field(default_factory=dict)
    runs: dict[str, dict[str, Any]] = field(default_factory=dict)
    replies: dict[str, FakeEndpoint] = field(default_factory=dict)
    refused: dict[str, KubeError] = field(default_factory=dict)  # method name -> its error
    forwarded: list[tuple[str, int]] = field(default_factory=list)

    def _check(self, method: str) -> None:
        if method in self.refused:
            raise self.refused[method]

    def server_version(self) -> str:
        self._check("server_version")
        return "v1.35.2-eks-5a8b3c1"

    def nodes(self, label_selector: str) -> list[Any]:
        self._check("nodes")
        return [n for n in self.nodes_ if labels_match(n, label_selector)]

    def resource_slices(self) -> list[Any]:
        self._check("resource_slices")
        return list(self.slices)

    def pods(self, namespace: str, label_selector: str) -> list[Any]:
        self._check("pods")
        return [
            p for p in self.pods_
            if p.metadata.namespace == namespace and labels_match(p, label_selector)
        ]  # fmt: skip

    def resource_claim(self, namespace: str, name: str) -> Any:
        return self.claims.get(name)

    def job(self, namespace: str, name: str) -> Any:
        return next((j for j in self.jobs_ if j.metadata.name == name), None)

    def jobs(self, namespace: str, label_selector: str) -> list[Any]:
        return [j for j in self.jobs_ if labels_match(j, label_selector)]

    def service(self, namespace: str, name: str) -> Any:
        return self.services.get((namespace, name))

    def rollout(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.rollouts.get(name)

    def analysis_run(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.runs.get(name)

    def pod_endpoint(self, pod: Any, port: int) -> Endpoint:
        self.forwarded.append((pod.metadata.name, port))
        return self.replies.get(pod.metadata.name, FakeEndpoint(f"pod {pod.metadata.name}"))


def serving_pods() -> list[Any]:
    return [pod("pod-baseline-ready"), pod("pod-speculative-ready")]


def healthy(config: ExperimentConfig = CONFIG) -> FakeReader:
    """Everything deployed and well, named as ``config`` renders it."""
    pods = serving_pods()
    envoy = pod("pod-gateway-envoy")
    rollout = fixture("rollout-canary", name=kube.rollout_name(config))
    run = fixture("analysisrun-running")
    arm_answers = {("GET", MODELS_PATH): models_reply(MODEL)}
    gateway_answers = {("POST", COMPLETIONS_PATH): completion_stream(MODEL)}
    return FakeReader(
        nodes_=[node()],
        slices=[resource_slice()],
        pods_=[*pods, envoy],
        claims={c.metadata.name: c for c in (claim_for(p) for p in pods)},
        jobs_=[
            job("job-model-import-complete", config, "import"),
            job("job-loadtest-running", config, "loadtest"),
        ],
        services={
            (NAMESPACE, "qwen-vllm"): model(fixture("service-baseline"), "V1Service"),
            (NAMESPACE, "qwen-sd-vllm"): model(fixture("service-speculative"), "V1Service"),
            (config.routing.eks.namespace, "qwen-sd-gateway-envoy"): model(
                fixture("service-gateway-envoy"), "V1Service"
            ),
        },
        rollouts={kube.rollout_name(config): rollout},
        runs={run["metadata"]["name"]: run},
        replies={
            **{p.metadata.name: FakeEndpoint(f"pod {p.metadata.name}", arm_answers) for p in pods},
            envoy.metadata.name: FakeEndpoint("pod envoy", gateway_answers),
        },
    )


# --- Cluster and nodes -------------------------------------------------------------------


def test_the_api_answering_passes_and_a_refusal_fails_naming_update_kubeconfig() -> None:
    assert kube.api_result(healthy(), CONFIG).status is Status.PASSED
    reader = healthy()
    reader.refused["server_version"] = KubeError("GET /version: HTTP 401 Unauthorized")
    result = kube.api_result(reader, CONFIG)
    assert result.status is Status.FAILED and "401" in result.detail
    assert "aws eks update-kubeconfig --name qwen-sd --region us-east-2" in result.fix


def test_the_neuron_nodes_ready_pass() -> None:
    nodes = kube.neuron_nodes(healthy(), CONFIG)
    result = kube.nodes_result(nodes, CONFIG)
    assert result.status is Status.PASSED and result.detail == "1 Ready of 1; both arms need 1"


def test_a_notready_node_fails_with_its_reason() -> None:
    result = kube.nodes_result([node(), node(ready=False)], CONFIG)
    assert result.status is Status.FAILED
    assert (
        "Ready=Unknown (NodeStatusUnknown: Kubelet stopped posting node status.)" in result.detail
    )
    assert "kubectl describe node" in result.fix


def test_too_few_nodes_for_both_arms_fails_naming_desired_size() -> None:
    config = build_config(context_from_pairs(["serving.replicas=2"]))  # 4 x 8 devices: 2 nodes
    result = kube.nodes_result([node()], config)
    assert result.status is Status.FAILED and "both arms need 2" in result.detail
    assert "cluster.neuron_nodes.desired_size" in result.fix


def test_no_node_of_the_instance_type_fails() -> None:
    result = kube.nodes_result([], CONFIG)
    assert result.status is Status.FAILED and result.detail.startswith("0 Ready of 0")


def test_each_node_publishing_its_devices_passes() -> None:
    result = kube.devices_result([node()], [resource_slice()], CONFIG)
    assert result.status is Status.PASSED, result
    assert result.detail == "ip-10-0-97-12.us-east-2.compute.internal: 16"


@pytest.mark.parametrize("slices", [[], [4]], ids=["none", "short"])
def test_a_node_publishing_fewer_devices_fails_pointing_at_the_driver(slices: list[int]) -> None:
    result = kube.devices_result([node()], [resource_slice(n) for n in slices], CONFIG)
    assert result.status is Status.FAILED
    assert f"compute.internal: {sum(slices)}" in result.detail
    assert f"kubectl -n {CONFIG.cluster.neuron_namespace} get pods" in result.fix


def test_another_drivers_slices_do_not_count() -> None:
    other = fixture("resourceslice-neuron")
    other["spec"]["driver"] = "gpu.nvidia.com"
    result = kube.devices_result([node()], [model(other, "V1ResourceSlice")], CONFIG)
    assert result.status is Status.FAILED


def test_allocated_claims_pass() -> None:
    reader = healthy()
    result = kube.claims_result(reader, serving_pods(), CONFIG)
    assert result.status is Status.PASSED, result
    assert result.detail.count(": 8 devices") == 2


def test_an_unallocated_claim_fails_explaining_what_the_template_asks() -> None:
    pending = pod("pod-speculative-precompiling")
    reader = healthy()
    reader.claims = {c.metadata.name: c for c in [claim_for(pending, allocated=False)]}
    result = kube.claims_result(reader, [pending], CONFIG)
    assert result.status is Status.FAILED and "is not allocated" in result.detail
    assert "asks for 8 neuron.aws.com devices" in result.fix


def test_a_pod_without_a_generated_claim_fails() -> None:
    bare = fixture("pod-baseline-ready")
    bare["status"].pop("resourceClaimStatuses")
    result = kube.claims_result(healthy(), [model(bare, "V1Pod")], CONFIG)
    assert result.status is Status.FAILED and "no ResourceClaim generated yet" in result.detail


# --- Serving -----------------------------------------------------------------------------


def test_a_complete_import_job_passes() -> None:
    result = kube.import_result(healthy(), CONFIG)
    assert result.status is Status.PASSED, result
    assert result.title == f"the model-import Job {kube.model_import_job_name(CONFIG)} is complete"


@pytest.mark.parametrize(
    ("fixture_name", "seen", "fix"),
    [
        ("job-loadtest-failed", "failed (BackoffLimitExceeded", "delete it and cdk deploy"),
        ("job-loadtest-running", "running: started", "wait for it"),
    ],
)
def test_an_import_job_not_complete_fails(fixture_name: str, seen: str, fix: str) -> None:
    reader = healthy()
    reader.jobs_ = [job(fixture_name, CONFIG, "import")]
    result = kube.import_result(reader, CONFIG)
    assert result.status is Status.FAILED and seen in result.detail and fix in result.fix


def test_a_missing_import_job_fails_saying_to_check_with_the_deploys_config() -> None:
    reader = healthy()
    reader.jobs_ = []
    result = kube.import_result(reader, CONFIG)
    assert result.status is Status.FAILED and "-c/--config the deploy used" in result.fix


@pytest.mark.parametrize("arm", list(Arm))
def test_an_arms_ready_pods_pass(arm: Arm) -> None:
    pods = kube.arm_pods(healthy(), CONFIG, arm)
    assert len(pods) == 1  # by the Rollout's labels and the arm's: not the other arm's pod
    assert kube.ready_result(pods, CONFIG, arm).status is Status.PASSED


def test_a_precompiling_pod_fails_saying_where_it_stands_and_the_budget() -> None:
    result = kube.ready_result([pod("pod-speculative-precompiling")], CONFIG, Arm.SPECULATIVE)
    assert result.status is Status.FAILED
    assert "in init container precompile since 2026-11-28 09:02:17" in result.detail
    assert "precompiles (up to" in result.fix


def test_no_speculative_pod_points_at_the_canary() -> None:
    result = kube.ready_result([], CONFIG, Arm.SPECULATIVE)
    assert result.status is Status.FAILED and "canary check" in result.fix


def test_the_canary_revision_passes() -> None:
    rollout = healthy().rollouts[kube.rollout_name(CONFIG)]
    result = kube.canary_result(rollout, CONFIG)
    assert result.status is Status.PASSED, result
    assert "canary 84b6c5d7f9 beside stable 6f7d9c8b54, step 2, phase Paused" in result.detail


def status_changed(**status: Any) -> dict[str, Any]:
    rollout = copy.deepcopy(healthy().rollouts[kube.rollout_name(CONFIG)])
    rollout["status"].update(status)
    return rollout


def test_an_aborted_rollout_fails_saying_who_retries() -> None:
    aborted = status_changed(
        abort=True, phase="Degraded", currentStepIndex=0,
        message="RolloutAborted: Rollout aborted update to revision 2: Metric "
        '"spec-decode-arm-metrics-missing" assessed Failed due to failed (1) > failureLimit (0)',
    )  # fmt: skip
    result = kube.canary_result(aborted, CONFIG)
    assert result.status is Status.FAILED and "aborted (the guardrail rollback)" in result.detail
    assert "kubectl argo rollouts retry rollout" in result.fix
    assert "routing.eks.operators_group" in result.fix


def test_a_rollout_without_a_canary_fails_pointing_at_the_patch() -> None:
    result = kube.canary_result(status_changed(currentPodHash="6f7d9c8b54"), CONFIG)
    assert result.status is Status.FAILED and "no canary" in result.detail
    assert "canary-patch.json" in result.fix


def test_a_rollout_without_a_stable_revision_fails_pointing_at_the_controller() -> None:
    result = kube.canary_result(status_changed(stableRS=""), CONFIG)
    assert result.status is Status.FAILED and "argo-rollouts get pods" in result.fix


def test_a_missing_rollout_fails() -> None:
    result = kube.canary_result(None, CONFIG)
    assert result.status is Status.FAILED and "no Rollout qwen-sd-arms-" in result.detail


def test_services_selecting_their_revisions_pass() -> None:
    reader = healthy()
    rollout = reader.rollouts[kube.rollout_name(CONFIG)]
    assert kube.services_result(reader, rollout, CONFIG).status is Status.PASSED


def test_the_speculative_service_on_the_stable_pods_fails() -> None:
    reader = healthy()
    pointed = fixture("service-speculative")
    pointed["spec"]["selector"]["rollouts-pod-template-hash"] = "6f7d9c8b54"
    reader.services[(NAMESPACE, "qwen-sd-vllm")] = model(pointed, "V1Service")
    result = kube.services_result(reader, reader.rollouts[kube.rollout_name(CONFIG)], CONFIG)
    assert result.status is Status.FAILED
    assert "selects revision '6f7d9c8b54', not the canary '84b6c5d7f9'" in result.detail


def test_a_running_analysis_passes() -> None:
    reader = healthy()
    result = kube.analysis_result(reader, reader.rollouts[kube.rollout_name(CONFIG)], CONFIG)
    assert result.status is Status.PASSED, result
    assert result.detail == "AnalysisRun qwen-sd-arms-d6d389a8ad-84b6c5d7f9-2: Running"


def test_a_failed_analysis_fails_quoting_argos_message() -> None:
    reader = healthy()
    failed = fixture("analysisrun-failed")
    reader.runs = {failed["metadata"]["name"]: failed}
    result = kube.analysis_result(reader, reader.rollouts[kube.rollout_name(CONFIG)], CONFIG)
    assert result.status is Status.FAILED
    assert 'Failed (Metric "spec-decode-arm-metrics-missing" assessed Failed' in result.detail
    assert "get analysisrun qwen-sd-arms-d6d389a8ad-84b6c5d7f9-2 -o yaml" in result.fix


def test_no_analysis_yet_fails_naming_the_starting_step() -> None:
    rollout = status_changed(currentStepIndex=1, canary={})
    result = kube.analysis_result(healthy(), rollout, CONFIG)
    assert result.status is Status.FAILED
    assert "at step 1, the analysis starts at step 2" in result.detail


def test_the_gateway_endpoint_is_an_envoy_pod_at_the_services_target_port() -> None:
    reader = healthy()
    endpoint = kube.gateway_endpoint(reader, CONFIG)
    assert not isinstance(endpoint, str)
    assert reader.forwarded == [("envoy-qwen-qwen-sd-gateway-3b5e7a91-6c9d8f7b5-r4t2w", 8000)]


def test_a_named_target_port_is_resolved_in_the_pods_containers() -> None:
    reader = healthy()
    service = fixture("service-gateway-envoy")
    service["spec"]["ports"][0]["targetPort"] = "http-8000"
    reader.services[(CONFIG.routing.eks.namespace, "qwen-sd-gateway-envoy")] = model(
        service, "V1Service"
    )
    kube.gateway_endpoint(reader, CONFIG)
    assert reader.forwarded[-1][1] == 8000


def test_no_gateway_service_says_who_creates_it() -> None:
    reader = healthy()
    reader.services.pop((CONFIG.routing.eks.namespace, "qwen-sd-gateway-envoy"))
    why = kube.gateway_endpoint(reader, CONFIG)
    assert isinstance(why, str) and "Envoy Gateway creates it" in why


# --- Load test ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fixture_name", "state"),
    [("job-loadtest-running", "running"), ("job-model-import-complete", "complete")],
)
def test_a_running_or_complete_load_test_passes_with_its_state(
    fixture_name: str, state: str
) -> None:
    reader = healthy()
    reader.jobs_ = [job(fixture_name, CONFIG, "loadtest")]
    result = kube.loadtest_result(reader, CONFIG)
    assert result.status is Status.PASSED and result.detail.startswith(f"{state}:")


def test_a_failed_load_test_fails_with_its_logs() -> None:
    reader = healthy()
    reader.jobs_ = [job("job-loadtest-failed", CONFIG, "loadtest")]
    result = kube.loadtest_result(reader, CONFIG)
    assert result.status is Status.FAILED and "BackoffLimitExceeded" in result.detail
    assert f"logs job/{kube.loadtest_job_name(CONFIG)}" in result.fix


def test_a_missing_load_test_fails_listing_the_load_test_jobs_there() -> None:
    reader = healthy()
    reader.jobs_ = [
        model(fixture("job-loadtest-running", name="qwen-sd-loadtest-0000000000"), "V1Job")
    ]
    result = kube.loadtest_result(reader, CONFIG)
    assert result.status is Status.FAILED
    assert "load-test Jobs there: ['qwen-sd-loadtest-0000000000']" in result.detail


# --- the command on a cluster ------------------------------------------------------------


def arguments(*extra: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    return parser.parse_args([*PINS, *extra])


def run(
    reader: FakeReader, *extra: str, signer: Callable[[str], Any] | None = None
) -> tuple[int, str]:
    out = io.StringIO()
    code = cli.run(arguments(*extra), reader=reader, signer=signer, out=out)
    return code, out.getvalue()


def deployed_config() -> ExperimentConfig:
    from experiment.loading import config_from_arguments

    return config_from_arguments(arguments(), deploy=True)


def test_a_healthy_cluster_passes_every_kubernetes_and_serving_check() -> None:
    config = deployed_config()
    code, report = run(healthy(config))
    assert code == 0, report
    assert "✗" not in report
    for group in (Group.CLUSTER, Group.SERVING, Group.TELEMETRY, Group.LOADTEST):
        assert f"\n{group.value}\n" in f"\n{report}"
    assert f"✓ the baseline arm serves {MODEL}" in report
    assert "✓ the gateway answers class structured (rule speculative-0 -> speculative)" in report
    assert "✓ the gateway answers class open_ended (rule everything-else -> baseline)" in report
    assert f"✓ the load-test Job {kube.loadtest_job_name(config)}" in report
    # No --prometheus-url: the telemetry checks say how to run them.
    assert "skipped: no --prometheus-url: pass the cluster stack's PrometheusQueryUrl" in report
    assert report.rstrip().endswith("Status check results are ✓ (16 passed, 0 failed, 7 skipped)")


def test_an_unhealthy_cluster_exits_1_with_each_failure_and_its_fix() -> None:
    config = deployed_config()
    reader = healthy(config)
    failed = fixture("analysisrun-failed")
    reader.runs = {failed["metadata"]["name"]: failed}
    reader.jobs_ = [
        job("job-model-import-complete", config, "import"),
        job("job-loadtest-failed", config, "loadtest"),
    ]
    code, report = run(reader)
    assert code == 1
    assert "✗ the canary's guardrail analysis is Running" in report
    assert f"✗ the load-test Job {kube.loadtest_job_name(config)}" in report
    assert report.count("    fix: ") == 2
    assert "Status check results are ✗ (14 passed, 2 failed, 7 skipped)" in report


def test_an_unreachable_cluster_fails_once_and_skips_the_rest() -> None:
    reader = healthy(deployed_config())
    reader.refused["server_version"] = KubeError("GET /version: connection refused")
    code, report = run(reader)
    assert code == 1
    assert report.count("✗") == 2  # the API check, and the verdict line
    assert "skipped: the cluster's API does not answer" in report


def test_refused_pods_fail_every_check_that_reads_them() -> None:
    reader = healthy(deployed_config())
    reader.refused["pods"] = KubeError("list pods in qwen: HTTP 403 Forbidden")
    code, report = run(reader)
    assert code == 1
    assert report.count("HTTP 403 Forbidden") >= 5  # claims, both Ready, both serves, gateway


def test_a_refused_list_fails_that_check_with_the_rbac_fix() -> None:
    reader = healthy(deployed_config())
    reader.refused["resource_slices"] = KubeError("list resourceslices: HTTP 403 Forbidden")
    code, report = run(reader)
    assert code == 1 and "HTTP 403 Forbidden" in report and "kubectl auth can-i" in report


def test_only_an_amp_workspace_is_signed_with_the_configured_region(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    factory = cli.default_signer(CONFIG)
    assert factory("http://127.0.0.1:9090") is None
    url = "https://aps-workspaces.us-east-2.amazonaws.com/workspaces/ws-0a1b2c3d"
    signer = factory(url)
    assert signer is not None
    headers = signer("GET", f"{url}/api/v1/query?query=vector%281%29")
    assert "/us-east-2/aps/aws4_request" in headers["Authorization"]


def test_an_invalid_configuration_exits_2_with_the_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    args = parser.parse_args([*PINS, "-c", "routing.eks.gateway_api_plugin_sha256=abc"])
    assert cli.run(args, reader=healthy(), out=io.StringIO()) == cli.EXIT_BAD_INPUT
    assert "routing.eks.gateway_api_plugin_sha256" in capsys.readouterr().err


def test_a_pods_port_is_reached_over_the_clients_port_forward_socket(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The HTTP exchange over the socket kubernetes.stream.portforward hands out (one end of a
    socketpair behind the client's own wrapper, which swallows TCP_NODELAY), answered on the
    other end as the pod's vLLM would; the forward is closed afterwards."""
    import socket
    import threading

    from kubernetes.stream import ws_client

    ours, pods = socket.socketpair()
    received: list[bytes] = []
    calls: list[tuple[str, str, str]] = []

    def serve() -> None:
        request = b""
        while b"\r\n\r\n" not in request:
            request += pods.recv(4096)
        received.append(request)
        body = json.dumps({"object": "list", "data": [{"id": MODEL}]}).encode()
        pods.sendall(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
            + f"content-length: {len(body)}\r\n\r\n".encode()
            + body
        )

    class Forward:
        closed = False

        def socket(self, port: int) -> Any:
            assert port == 8000
            return ws_client.PortForward._Port._Socket(ours)

        def close(self) -> None:
            self.closed = True
            ours.close()

    forward = Forward()

    def portforward(method: Any, name: str, namespace: str, *, ports: str) -> Forward:
        calls.append((name, namespace, ports))
        return forward

    monkeypatch.setattr("kubernetes.stream.portforward", portforward)
    server = threading.Thread(target=serve, daemon=True)
    server.start()
    from kubernetes.client import ApiClient, CoreV1Api

    endpoint = kube.PortForwardEndpoint(CoreV1Api(ApiClient()), "qwen", "pod-a", 8000, 5.0)
    reply = endpoint.request("GET", MODELS_PATH)
    server.join(5)
    assert reply.status == 200 and reply.json()["data"] == [{"id": MODEL}]
    assert calls == [("pod-a", "qwen", "8000")]
    assert received[0].startswith(b"GET /v1/models HTTP/1.1\r\n")
    assert forward.closed
    assert endpoint.where == "pod qwen/pod-a:8000 (port-forward)"
    pods.close()
