"""The checks over Kubernetes objects, read through ``KubeReader``.

``ClusterReader`` is the implementation on a cluster: the official ``kubernetes`` client and
its typed models (``V1Node``, ``V1Pod``, ``V1Job``, ``V1Service``, ``V1ResourceSlice``,
``ResourceV1ResourceClaim``: resource.k8s.io/v1, the DRA API version charts/dra.py renders),
and ``CustomObjectsApi`` for Argo's Rollout and AnalysisRun, which have no typed model there.
Tests hand the checks the same models, deserialized from ``kubectl get -o json``-shaped
fixtures. Every name looked up is the one the charts render from the same configuration.

Fields read, with their sources:

- a node or pod is Ready when its ``Ready`` condition is ``"True"``; a Job has finished when
  its ``Complete`` or ``Failed`` condition is ``"True"`` (V1JobCondition.type: "Complete or
  Failed"); a pod's generated claim is ``status.resourceClaimStatuses[].resourceClaimName``
  ("the ResourceClaim that was generated for the Pod"), allocated once ``status.allocation``
  is set; a slice's devices are ``spec.devices`` of ``spec.driver`` on ``spec.nodeName`` (the
  field descriptions of the client's models, generated from Kubernetes' OpenAPI release-1.37);
- the Rollout's ``status.stableRS``, ``currentPodHash``, ``abort``, ``phase``, ``message``,
  ``currentStepIndex`` and ``canary.currentBackgroundAnalysisRunStatus`` {name, status,
  message}; an AnalysisRun's ``status.phase`` and ``message`` (argo-rollouts v1.9.1
  pkg/apis/rollouts/v1alpha1/types.go RolloutStatus, CanaryStatus, RolloutAnalysisRunStatus;
  analysis_types.go AnalysisRunStatus, AnalysisPhase: guardrails.argo.Phase).
"""

from __future__ import annotations

import http.client
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from charts import dra
from charts.gateway import gateway_name, gateway_service_name
from charts.loadtest_job import COMPONENT as LOADTEST_COMPONENT
from charts.loadtest_job import job as loadtest_job
from charts.model_import_job import job_name as model_import_job_name
from charts.naming import ARM_LABEL, COMPONENT, PART_OF, claim_template_name
from charts.rollout import (
    ROLLOUTS_API,
    analysis_starting_step,
    canary_start_message,
    rollout_name,
    rollout_pods,
)
from charts.vllm_service import INSTANCE_TYPE_LABEL
from deploy_check.http import DEFAULT_TIMEOUT_S, Endpoint, HttpError, Reply, exchange
from deploy_check.model import Group, Result
from experiment.config import Arm, ExperimentConfig
from guardrails.argo import Phase
from runtime.arms_routed import HASH_LABEL, not_routed

if TYPE_CHECKING:  # the models are only read here; ClusterReader imports the client itself
    from kubernetes.client import (
        ApiClient,
        CoreV1Api,
        ResourceV1ResourceClaim,
        V1Job,
        V1Node,
        V1Pod,
        V1ResourceSlice,
        V1Service,
    )

NOT_FOUND = 404
TRUE = "True"  # a condition's status
READY = "Ready"  # NodeReady / PodReady
JOB_COMPLETE = "Complete"
JOB_FAILED = "Failed"
ROLLOUTS_GROUP, ROLLOUTS_VERSION = ROLLOUTS_API.split("/")


class KubeError(Exception):
    """The API server did not answer, or refused (RBAC, a missing CRD)."""


class KubeReader(Protocol):
    """What the checks read; ``None`` where the object does not exist."""

    def server_version(self) -> str: ...

    def nodes(self, label_selector: str) -> list[V1Node]: ...

    def resource_slices(self) -> list[V1ResourceSlice]: ...

    def pods(self, namespace: str, label_selector: str) -> list[V1Pod]: ...

    def resource_claim(self, namespace: str, name: str) -> ResourceV1ResourceClaim | None: ...

    def job(self, namespace: str, name: str) -> V1Job | None: ...

    def jobs(self, namespace: str, label_selector: str) -> list[V1Job]: ...

    def service(self, namespace: str, name: str) -> V1Service | None: ...

    def rollout(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    def analysis_run(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    def pod_endpoint(self, pod: V1Pod, port: int) -> Endpoint: ...


_T = TypeVar("_T")


class ClusterReader:
    """``KubeReader`` over the API server the kubeconfig (``context``) names."""

    def __init__(self, api_client: ApiClient, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        from kubernetes.client import CoreV1Api

        self.api_client = api_client
        self.timeout_s = timeout_s
        self.core = CoreV1Api(api_client)

    @classmethod
    def from_kubeconfig(
        cls, context: str | None, timeout_s: float = DEFAULT_TIMEOUT_S
    ) -> ClusterReader:
        from kubernetes import config as kubeconfig

        try:
            api_client = kubeconfig.new_client_from_config(context=context)
        except (kubeconfig.ConfigException, OSError) as err:
            raise KubeError(f"no usable kubeconfig: {err}") from None
        return cls(api_client, timeout_s)

    def _call(self, what: str, call: Callable[..., _T], *args: Any) -> _T | None:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError as Urllib3Error

        try:
            return call(*args, _request_timeout=self.timeout_s)
        except ApiException as err:
            if err.status == NOT_FOUND:
                return None
            raise KubeError(f"{what}: HTTP {err.status} {err.reason}") from None
        except (Urllib3Error, OSError) as err:
            raise KubeError(f"{what}: {err}") from None

    def _list(self, what: str, call: Callable[..., Any], *args: Any, selector: str) -> list[Any]:
        def listed(*positional: Any, _request_timeout: float) -> Any:
            return call(*positional, label_selector=selector, _request_timeout=_request_timeout)

        found = self._call(what, listed, *args)
        return list(found.items or []) if found is not None else []

    def server_version(self) -> str:
        from kubernetes.client import VersionApi

        info = self._call("GET /version", VersionApi(self.api_client).get_code)
        return info.git_version if info is not None else "unknown"

    def nodes(self, label_selector: str) -> list[V1Node]:
        return self._list("list nodes", self.core.list_node, selector=label_selector)

    def resource_slices(self) -> list[V1ResourceSlice]:
        from kubernetes.client import ResourceV1Api

        api = ResourceV1Api(self.api_client)
        found = self._call("list resourceslices", api.list_resource_slice)
        return list(found.items or []) if found is not None else []

    def pods(self, namespace: str, label_selector: str) -> list[V1Pod]:
        call = self.core.list_namespaced_pod
        return self._list(f"list pods in {namespace}", call, namespace, selector=label_selector)

    def resource_claim(self, namespace: str, name: str) -> ResourceV1ResourceClaim | None:
        from kubernetes.client import ResourceV1Api

        call = ResourceV1Api(self.api_client).read_namespaced_resource_claim
        return self._call(f"get resourceclaim {name}", call, name, namespace)

    def job(self, namespace: str, name: str) -> V1Job | None:
        from kubernetes.client import BatchV1Api

        call = BatchV1Api(self.api_client).read_namespaced_job
        return self._call(f"get job {name}", call, name, namespace)

    def jobs(self, namespace: str, label_selector: str) -> list[V1Job]:
        from kubernetes.client import BatchV1Api

        call = BatchV1Api(self.api_client).list_namespaced_job
        return self._list(f"list jobs in {namespace}", call, namespace, selector=label_selector)

    def service(self, namespace: str, name: str) -> V1Service | None:
        return self._call(f"get service {name}", self.core.read_namespaced_service, name, namespace)

    def _custom(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        from kubernetes.client import CustomObjectsApi

        call = CustomObjectsApi(self.api_client).get_namespaced_custom_object
        args = (ROLLOUTS_GROUP, ROLLOUTS_VERSION, namespace, plural, name)
        found = self._call(f"get {plural} {name}", call, *args)
        return dict(found) if isinstance(found, Mapping) else None

    def rollout(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._custom("rollouts", namespace, name)

    def analysis_run(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._custom("analysisruns", namespace, name)

    def pod_endpoint(self, pod: V1Pod, port: int) -> Endpoint:
        return PortForwardEndpoint(self.core, _namespace(pod), _name(pod), port, self.timeout_s)


@dataclass(frozen=True)
class PortForwardEndpoint:
    """A pod's port through the API server (``kubectl port-forward``'s path: the kubelet
    connects inside the pod, so the serving pods' NetworkPolicies, which admit only the
    gateway and the load test, do not stand in the way). One forward per request."""

    core: CoreV1Api
    namespace: str
    pod: str
    port: int
    timeout_s: float

    @property
    def where(self) -> str:
        return f"pod {self.namespace}/{self.pod}:{self.port} (port-forward)"

    def request(
        self,
        method: str,
        path: str,
        *,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Reply:
        from kubernetes.client.exceptions import ApiException
        from kubernetes.stream import portforward
        from websocket import WebSocketException

        try:
            forward = portforward(
                self.core.connect_get_namespaced_pod_portforward,
                self.pod,
                self.namespace,
                ports=str(self.port),
            )
        except (ApiException, WebSocketException, OSError) as err:
            raise HttpError(f"port-forward refused: {err}") from None
        try:
            connection = http.client.HTTPConnection("localhost", self.port, timeout=self.timeout_s)
            sock = forward.socket(self.port)
            sock.settimeout(self.timeout_s)
            connection.sock = sock
            return exchange(connection, method, path, body, headers)
        finally:
            forward.close()


def _name(obj: V1Pod | V1Node | V1Job) -> str:
    return str(obj.metadata.name) if obj.metadata and obj.metadata.name else "?"


def _namespace(obj: V1Pod) -> str:
    return str(obj.metadata.namespace) if obj.metadata and obj.metadata.namespace else ""


def label_selector(labels: Mapping[str, str]) -> str:
    return ",".join(f"{key}={value}" for key, value in sorted(labels.items()))


def _condition(conditions: Sequence[Any] | None, kind: str) -> Any | None:
    return next((c for c in conditions or [] if c.type == kind), None)


def node_ready(node: V1Node) -> bool:
    condition = _condition(node.status.conditions if node.status else None, READY)
    return condition is not None and condition.status == TRUE


def pod_ready(pod: V1Pod) -> bool:
    condition = _condition(pod.status.conditions if pod.status else None, READY)
    return condition is not None and condition.status == TRUE


# --- Cluster and nodes -------------------------------------------------------------------

CLUSTER = Group.CLUSTER
API_TITLE = "the cluster's API answers"


def api_failed(config: ExperimentConfig, why: str) -> Result:
    return Result.failed(
        CLUSTER,
        API_TITLE,
        why,
        f"point your kubeconfig at the cluster: aws eks update-kubeconfig --name "
        f"{config.cluster.name} --region {config.region} (or pass --kube-context); the "
        f"endpoint is {config.cluster.endpoint_access.value}: reach it from where "
        "cluster.endpoint_access allows",
    )


def api_result(reader: KubeReader, config: ExperimentConfig) -> Result:
    try:
        version = reader.server_version()
    except KubeError as err:
        return api_failed(config, str(err))
    return Result.passed(CLUSTER, API_TITLE, f"Kubernetes {version}")


def nodes_title(config: ExperimentConfig) -> str:
    return f"the {config.cluster.neuron_nodes.instance_type} nodes are Ready"


def neuron_nodes(reader: KubeReader, config: ExperimentConfig) -> list[V1Node]:
    instance_type = config.cluster.neuron_nodes.instance_type
    return reader.nodes(label_selector({INSTANCE_TYPE_LABEL: instance_type}))


def nodes_result(nodes: Sequence[V1Node], config: ExperimentConfig) -> Result:
    title = nodes_title(config)
    ready = [_name(node) for node in nodes if node_ready(node)]
    not_ready = [f"{_name(node)}: {_ready_reason(node)}" for node in nodes if not node_ready(node)]
    needed = config.neuron_nodes_for_arms()  # every serving pod at once
    seen = f"{len(ready)} Ready of {len(nodes)}; both arms need {needed}"
    if not_ready:
        return Result.failed(
            CLUSTER,
            title,
            "\n".join([seen, *not_ready]),
            "kubectl describe node <name> says why (the kubelet, the Neuron driver, disk or "
            "memory pressure); EC2 replaces an unhealthy node of the managed node group",
        )
    if len(ready) < needed:
        return Result.failed(
            CLUSTER,
            title,
            seen,
            f"the node group has too few nodes: raise cluster.neuron_nodes.desired_size "
            f"(now {config.cluster.neuron_nodes.desired_size}) or get trn2 capacity in the "
            "configured AZs (cluster.neuron_nodes.capacity_type), then cdk deploy",
        )
    return Result.passed(CLUSTER, title, seen)


def _ready_reason(node: V1Node) -> str:
    condition = _condition(node.status.conditions if node.status else None, READY)
    if condition is None:
        return "no Ready condition yet"
    return f"Ready={condition.status} ({condition.reason}: {condition.message})"


def devices_title(config: ExperimentConfig) -> str:
    return (
        f"each Neuron node publishes its {config.cluster.neuron_nodes.devices} devices "
        f"(ResourceSlices of {dra.DRIVER})"
    )


def devices_result(
    nodes: Sequence[V1Node], slices: Sequence[V1ResourceSlice], config: ExperimentConfig
) -> Result:
    title = devices_title(config)
    expected = config.cluster.neuron_nodes.devices
    published: dict[str, int] = {_name(node): 0 for node in nodes}
    for piece in slices:
        spec = piece.spec
        if spec.driver == dra.DRIVER and spec.node_name in published:
            published[spec.node_name] += len(spec.devices or [])
    seen = ", ".join(f"{node}: {count}" for node, count in sorted(published.items()))
    short = {node: count for node, count in published.items() if count < expected}
    if not published or short:
        return Result.failed(
            CLUSTER,
            title,
            seen or "no Neuron node",
            f"the Neuron DRA driver publishes them: kubectl -n {config.cluster.neuron_namespace} "
            f"get pods (its DaemonSet, one pod per node), then kubectl get resourceslices "
            f"--field-selector spec.driver={dra.DRIVER}",
        )
    return Result.passed(CLUSTER, title, seen)


CLAIMS_TITLE = "the serving pods' ResourceClaims are allocated"


def claims_result(reader: KubeReader, pods: Sequence[V1Pod], config: ExperimentConfig) -> Result:
    """Each serving pod's generated claim (from the claim template, charts/dra.py) holds its
    devices: the scheduler allocated it."""
    template = claim_template_name(config)
    fix = (
        f"kubectl -n {config.serving.namespace} describe resourceclaim <name> says why: the "
        f"template {template} asks for {config.serving.neuron_devices} {dra.DEVICE_CLASS} "
        f"devices of one NeuronLink group on a {config.cluster.neuron_nodes.instance_type}; a "
        "node with that many free devices must publish them (the check above)"
    )
    if not pods:
        return Result.failed(CLUSTER, CLAIMS_TITLE, "no serving pod", "see the Serving checks")
    seen, problems = [], []
    for pod in pods:
        claim_name = _claim_name(pod)
        if claim_name is None:
            problems.append(f"{_name(pod)}: no ResourceClaim generated yet")
            continue
        claim = reader.resource_claim(config.serving.namespace, claim_name)
        allocation = claim.status.allocation if claim and claim.status else None
        if allocation is None:
            problems.append(f"{_name(pod)}: claim {claim_name} is not allocated")
            continue
        results = allocation.devices.results if allocation.devices else None
        seen.append(f"{claim_name}: {len(results or [])} devices")
    if problems:
        return Result.failed(CLUSTER, CLAIMS_TITLE, "\n".join(problems), fix)
    return Result.passed(CLUSTER, CLAIMS_TITLE, ", ".join(seen))


def _claim_name(pod: V1Pod) -> str | None:
    statuses = pod.status.resource_claim_statuses if pod.status else None
    for status in statuses or []:
        if status.name == dra.CLAIM_NAME:
            return str(status.resource_claim_name) if status.resource_claim_name else None
    return None


# --- Serving -----------------------------------------------------------------------------

SERVING = Group.SERVING


def job_state(job: V1Job) -> str:
    """``complete``, ``failed``, ``running`` (a pod active) or ``pending``."""
    conditions = job.status.conditions if job.status else None
    for kind, state in ((JOB_COMPLETE, "complete"), (JOB_FAILED, "failed")):
        condition = _condition(conditions, kind)
        if condition is not None and condition.status == TRUE:
            return state
    return "running" if job.status and job.status.active else "pending"


def _job_failure(job: V1Job) -> str:
    condition = _condition(job.status.conditions if job.status else None, JOB_FAILED)
    return f"{condition.reason}: {condition.message}" if condition else ""


def import_title(config: ExperimentConfig) -> str:
    return f"the model-import Job {model_import_job_name(config)} is complete"


def import_result(reader: KubeReader, config: ExperimentConfig) -> Result:
    name = model_import_job_name(config)
    namespace = config.serving.namespace
    title = import_title(config)
    job = reader.job(namespace, name)
    logs = f"kubectl -n {namespace} logs job/{name}"
    if job is None:
        return Result.failed(SERVING, title, f"no Job {name} in {namespace}", _rerun_fix(config))
    state = job_state(job)
    if state == "complete":
        return Result.passed(SERVING, title, _job_times(job))
    if state == "failed":
        return Result.failed(
            SERVING,
            title,
            f"failed ({_job_failure(job)})",
            f"{logs} names the model and file; a hub that needs a token wants "
            "model_store.hub_token_secret. Jobs are immutable: delete it and cdk deploy again "
            "(verified files are kept)",
        )
    return Result.failed(
        SERVING,
        title,
        f"{state}: {_job_times(job)}",
        f"wait for it ({logs} -f); the serving pods wait for their models meanwhile",
    )


def _job_times(job: V1Job) -> str:
    status = job.status
    if status is None or status.start_time is None:
        return "not started"
    if status.completion_time is not None:
        return f"ran {status.start_time:%Y-%m-%d %H:%M} to {status.completion_time:%H:%M} UTC"
    return f"started {status.start_time:%Y-%m-%d %H:%M} UTC"


def _rerun_fix(config: ExperimentConfig) -> str:
    return (
        "run the check with the -c/--config the deploy used (the names derive from them); "
        f"kubectl -n {config.serving.namespace} get jobs,rollouts lists what exists"
    )


def arm_pods(reader: KubeReader, config: ExperimentConfig, arm: Arm) -> list[V1Pod]:
    """The arm's pods: the Rollout's (its shared labels) with the arm's label."""
    labels = {**rollout_pods(config), ARM_LABEL: arm.value}
    return reader.pods(config.serving.namespace, label_selector(labels))


def ready_title(config: ExperimentConfig, arm: Arm) -> str:
    return f"the {arm.value} arm's pods are Ready ({config.serving.replicas} wanted)"


def ready_result(pods: Sequence[V1Pod], config: ExperimentConfig, arm: Arm) -> Result:
    title = ready_title(config, arm)
    ready = [pod for pod in pods if pod_ready(pod)]
    waiting = [f"{_name(pod)}: {pod_progress(pod)}" for pod in pods if not pod_ready(pod)]
    seen = f"{len(ready)} Ready of {len(pods)}"
    if len(ready) >= config.serving.replicas:
        return Result.passed(SERVING, title, ", ".join(_name(pod) for pod in ready))
    namespace = config.serving.namespace
    if not pods and arm is Arm.SPECULATIVE:
        fix = "the canary revision has no pod: see the canary check below"
    else:
        fix = (
            f"kubectl -n {namespace} describe pod <name> and kubectl -n {namespace} logs <name> "
            "-c <container>. " + canary_start_message(config)
        )
    return Result.failed(SERVING, title, "\n".join([seen, *waiting]), fix)


def pod_progress(pod: V1Pod) -> str:
    """Where a pod that is not Ready stands: its running or stuck init container, a
    container's waiting reason, or why it is not scheduled."""
    status = pod.status
    if status is None:
        return "no status yet"
    for container in status.init_container_statuses or []:
        state = container.state
        if state and state.running:
            return f"in init container {container.name} since {state.running.started_at}"
        if state and state.waiting:
            return f"init container {container.name} waiting: {state.waiting.reason}"
    for container in status.container_statuses or []:
        state = container.state
        if state and state.waiting:
            return f"container {container.name} waiting: {state.waiting.reason}"
        if state and state.running and not container.ready:
            return f"container {container.name} running, not ready (readiness probe)"
    scheduled = _condition(status.conditions, "PodScheduled")
    if scheduled is not None and scheduled.status != TRUE:
        return f"not scheduled: {scheduled.reason}: {scheduled.message}"
    return f"phase {status.phase}"


def pod_endpoints(reader: KubeReader, pods: Sequence[V1Pod], port: int) -> list[Endpoint]:
    return [reader.pod_endpoint(pod, port) for pod in pods if pod_ready(pod)]


def gateway_endpoint(reader: KubeReader, config: ExperimentConfig) -> Endpoint | str:
    """A Ready Envoy pod behind the gateway's Service, at the target of the Service's
    listener port (as ``kubectl port-forward svc/...`` resolves it); or why there is none."""
    namespace = config.routing.eks.namespace
    name = gateway_service_name(config)
    service = reader.service(namespace, name)
    if service is None or service.spec is None:
        return (
            f"no Service {name} in {namespace}: Envoy Gateway creates it for the Gateway "
            f"{gateway_name(config)} (kubectl -n {config.serving.namespace} describe gateway "
            f"{gateway_name(config)})"
        )
    ports = [p for p in service.spec.ports or [] if p.port == config.serving.port]
    pods = reader.pods(namespace, label_selector(service.spec.selector or {}))
    ready = [pod for pod in pods if pod_ready(pod)]
    if not ports or not ready:
        return f"Service {name} has {len(ready)} Ready Envoy pod(s) and ports {service.spec.ports}"
    target = ports[0].target_port if ports[0].target_port is not None else ports[0].port
    number = _container_port(ready[0], target)
    if number is None:
        return f"pod {_name(ready[0])} has no port named {target} (Service {name}'s targetPort)"
    return reader.pod_endpoint(ready[0], number)


def _container_port(pod: V1Pod, target: int | str) -> int | None:
    """A Service's targetPort on ``pod``: a number as is, a name looked up in its containers."""
    if isinstance(target, int):
        return target
    for container in pod.spec.containers if pod.spec else []:
        for port in container.ports or []:
            if port.name == target:
                return int(port.container_port)
    return None


@dataclass(frozen=True)
class RolloutState:
    """What the checks read of a Rollout's status (types.go RolloutStatus)."""

    stable_rs: str
    current_pod_hash: str
    abort: bool
    phase: str
    message: str
    step_index: int | None
    background_run: str
    background_status: str

    @classmethod
    def of(cls, rollout: Mapping[str, Any]) -> RolloutState:
        status = rollout.get("status") or {}
        background = (status.get("canary") or {}).get("currentBackgroundAnalysisRunStatus") or {}
        return cls(
            stable_rs=str(status.get("stableRS") or ""),
            current_pod_hash=str(status.get("currentPodHash") or ""),
            abort=bool(status.get("abort")),
            phase=str(status.get("phase") or ""),
            message=str(status.get("message") or ""),
            step_index=status.get("currentStepIndex"),
            background_run=str(background.get("name") or ""),
            background_status=str(background.get("status") or ""),
        )


def canary_title(config: ExperimentConfig) -> str:
    return f"the canary (speculative) revision of Rollout {rollout_name(config)} exists"


def _argo(config: ExperimentConfig) -> str:
    return f"kubectl argo rollouts get rollout {rollout_name(config)} -n {config.serving.namespace}"


def canary_result(rollout: Mapping[str, Any] | None, config: ExperimentConfig) -> Result:
    title = canary_title(config)
    if rollout is None:
        return Result.failed(
            SERVING, title, f"no Rollout {rollout_name(config)}", _rerun_fix(config)
        )
    state = RolloutState.of(rollout)
    seen = f"phase {state.phase or '?'}{f': {state.message}' if state.message else ''}"
    if state.abort:
        return Result.failed(
            SERVING,
            title,
            f"aborted (the guardrail rollback), {seen}",
            f"the failed AnalysisRun names the guardrail ({_argo(config)}); once the cause is "
            f"fixed a member of routing.eks.operators_group runs kubectl argo rollouts retry "
            f"rollout {rollout_name(config)} -n {config.serving.namespace}",
        )
    if not state.stable_rs:
        return Result.failed(
            SERVING,
            title,
            f"no stable (baseline) revision yet, {seen}",
            f"Argo Rollouts makes the first revision stable at once: is its controller running "
            f"(kubectl -n {config.routing.eks.rollouts_namespace} get pods)?",
        )
    if state.current_pod_hash in ("", state.stable_rs):
        return Result.failed(
            SERVING,
            title,
            f"the template is the stable revision {state.stable_rs}: no canary, {seen}",
            "the speculative template is a merge patch over the baseline: cdk deploy applies it "
            "(docs/routing.md); with kubectl, kubectl patch rollout.argoproj.io <rollout> "
            "--type merge --patch-file dist/canary-patch.json (docs/serving.md)",
        )
    return Result.passed(
        SERVING,
        title,
        f"canary {state.current_pod_hash} beside stable {state.stable_rs}, step "
        f"{state.step_index}, {seen}",
    )


SERVICES_TITLE = "each arm's Service selects its own revision"


def services_result(
    reader: KubeReader, rollout: Mapping[str, Any] | None, config: ExperimentConfig
) -> Result:
    """What the load test waits for (runtime/arms_routed.py ``not_routed``, the same test):
    the baseline Service on the stable pods, the speculative one on the canary's."""
    if rollout is None:
        return Result.failed(SERVING, SERVICES_TITLE, "no Rollout", "see the canary check")
    namespace = config.serving.namespace
    services = []
    for arm in Arm:
        found = reader.service(namespace, config.serving.service_name(arm))
        if found is None:
            return Result.failed(
                SERVING,
                SERVICES_TITLE,
                f"no Service {config.serving.service_name(arm)}",
                _rerun_fix(config),
            )
        selector = dict(found.spec.selector or {}) if found.spec else {}
        services.append({"spec": {"selector": selector}})  # what not_routed reads
    problem = not_routed(dict(rollout), services[0], services[1])
    if problem is not None:
        return Result.failed(
            SERVING,
            SERVICES_TITLE,
            problem,
            f"Argo moves the speculative Service to the canary once a canary pod is available; "
            f"{_argo(config)} shows where it stands",
        )
    state = RolloutState.of(rollout)
    return Result.passed(
        SERVING,
        SERVICES_TITLE,
        f"{HASH_LABEL} {state.stable_rs} (baseline), {state.current_pod_hash} (speculative)",
    )


ANALYSIS_TITLE = "the canary's guardrail analysis is Running"


def analysis_result(
    reader: KubeReader, rollout: Mapping[str, Any] | None, config: ExperimentConfig
) -> Result:
    if rollout is None:
        return Result.failed(SERVING, ANALYSIS_TITLE, "no Rollout", "see the canary check")
    state = RolloutState.of(rollout)
    if not state.background_run:
        return Result.failed(
            SERVING,
            ANALYSIS_TITLE,
            f"no background analysis yet: the Rollout is at step {state.step_index}, the "
            f"analysis starts at step {analysis_starting_step(config)}",
            "it starts once the canary's pods are available and the start probe succeeded. "
            + canary_start_message(config),
        )
    run = reader.analysis_run(config.serving.namespace, state.background_run)
    phase = str(((run or {}).get("status") or {}).get("phase") or state.background_status)
    message = str(((run or {}).get("status") or {}).get("message") or "")
    seen = f"AnalysisRun {state.background_run}: {phase}{f' ({message})' if message else ''}"
    if phase == Phase.RUNNING:
        return Result.passed(SERVING, ANALYSIS_TITLE, seen)
    return Result.failed(
        SERVING,
        ANALYSIS_TITLE,
        seen,
        f"kubectl -n {config.serving.namespace} get analysisrun {state.background_run} -o yaml "
        "shows each guardrail's measurements; a Failed or Error run aborted the canary (see "
        "the telemetry checks for the alert that fired)",
    )


# --- Load test ---------------------------------------------------------------------------


def loadtest_job_name(config: ExperimentConfig) -> str:
    """The Job's name, as the chart renders it: a hash of its command and settings, neither
    of which reads the stack's inputs (charts/loadtest_job.py ``job``)."""
    from charts.inputs import ClusterInputs

    return str(loadtest_job(config, ClusterInputs("", ""))["metadata"]["name"])


def loadtest_title(config: ExperimentConfig) -> str:
    return f"the load-test Job {loadtest_job_name(config)}"


def loadtest_result(reader: KubeReader, config: ExperimentConfig) -> Result:
    name = loadtest_job_name(config)
    namespace = config.serving.namespace
    title = loadtest_title(config)
    job = reader.job(namespace, name)
    if job is None:
        labels = {PART_OF: config.project, COMPONENT: LOADTEST_COMPONENT}
        names = sorted(_name(other) for other in reader.jobs(namespace, label_selector(labels)))
        return Result.failed(
            Group.LOADTEST,
            title,
            f"no Job {name}; load-test Jobs there: {names or 'none'}",
            _rerun_fix(config),
        )
    state = job_state(job)
    logs = f"kubectl -n {namespace} logs job/{name}"
    if state == "failed":
        return Result.failed(
            Group.LOADTEST,
            title,
            f"failed ({_job_failure(job)})",
            f"{logs} says why (its first init container waits for both arms' Services, "
            f"bounded by loadtest.wait_ready_s {config.loadtest.wait_ready_s} s); a failed "
            "comparison is never retried: delete the Job and cdk deploy again",
        )
    return Result.passed(Group.LOADTEST, title, f"{state}: {_job_times(job)}")
