"""The load-test Job: Locust headless against both services, bounded in time.

Runs under its own service account, which EKS Pod Identity binds (CDK stack) to a role
that may only put metrics in the project's CloudWatch namespace and, when it replays a traffic
file (``loadtest.traffic.file``), read that one object of the model-store bucket
(``loadtest.traffic.bucket_key()``), which the run copies into its run directory. It first
waits, bounded by ``loadtest.wait_ready_s``, until each compared arm's Service selects its
own revision of the guardrail Rollout (init container, ``runtime/arms_routed.py``: before
the speculative pods are available, and after an abort, the speculative Service reaches
baseline pods), then for both services' ``/health`` (logged): on a first deploy they compile
for hours.

With ``loadtest.drive_gateway`` the Job also drives the tiered gateway as a third arm (``--tiered``,
``charts.gateway.gateway_url``: the Envoy Service the routing chart names, in Envoy
Gateway's namespace) after the two serving arms, in the same arms mode; it waits for the
gateway's ``/health`` too (the catch-all route answers it from the baseline).

With ``loadtest.workers`` N > 1 the Job's pod runs the arms' Locust masters (``python -m
loadtest run --workers-external``, N from the config file) and worker Jobs run N worker pods
each, of the same image and size (``worker_sets``). Arms at once (``loadtest.arms_mode``
concurrent, the default): both masters run in the pod together, each on its own port
(``loadtest.master_port_of``), and each arm has its own worker Job whose pods connect only to
that arm's port, so a worker can never take a share of the other arm's schedule. Arms in
turn (sequential): one master port and one worker Job whose pods serve each arm's master in
turn. A headless Service names the masters' pod with one port per master; the NetworkPolicy
opens each port only to its own arm's workers. With ``loadtest.drive_gateway`` the tiered master
runs last on the baseline's port (in turn: the shared one), whose worker pods serve it as one
more arm (``--arms``).

Why plain Jobs of workers plus a headless Service, not one Indexed Job: the master is a
different program (it waits, runs the arms, writes the report and publishes to CloudWatch
with the service account's role) while the workers only need the master's address; Locust
hands out worker indexes itself (the master's ``ack``), so the Job index would be a second,
unused numbering. The workers need no AWS access and run without the service account.
Worker pods retry until their arms' masters have run (loadtest/worker_pod.py), bounded by the
same deadline.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from charts.gateway import gateway_url
from charts.inputs import ClusterInputs
from charts.naming import ARM_LABEL, labels, metadata, role_with_binding, short_hash
from charts.rollout import ROLLOUTS_API, rollout_name
from experiment.config import Arm, ArmsMode, ExperimentConfig

COMPONENT = "loadtest"
# The resolved experiment config the stack was synthesized with, so the Job measures with
# the same names, scale and metric namespace (its IAM condition) as cdk.json says.
CONFIG_DIR = "/etc/specdecode/experiment"
CONFIG_FILE = "config.json"
# The image's root filesystem is read-only in the pod; records and reports go here.
RESULTS_DIR = "/results"
# The model-store bucket the master copies the traffic file from (loadtest.traffic.file set).
TRAFFIC_BUCKET_ENV = "TRAFFIC_BUCKET"


def service_url(config: ExperimentConfig, arm: Arm) -> str:
    serving = config.serving
    return f"http://{serving.service_name(arm)}.{serving.namespace}.svc:{serving.port}"


# Pods of the load test carry this label: the master (the Job that reports) or a worker.
ROLE_LABEL = "specdecode.aws/loadtest-role"
MASTER_ROLE = "master"
WORKER_ROLE = "worker"
# The one master port of arms in turn. Named ports are IANA_SVC_NAMEs: at most 15 of
# [-a-z0-9] (kubernetes/kubernetes: staging/src/k8s.io/apimachinery/pkg/util/validation/
# validation.go, IsValidPortName); the arms' own names ("speculative") fit.
SHARED_PORT_NAME = "locust-master"


def distributed(config: ExperimentConfig) -> bool:
    return config.loadtest.workers > 1


@dataclass(frozen=True)
class WorkerSet:
    """One Job of worker pods and the Locust master they connect to."""

    arm: Arm | None  # None: every arm's master in turn (sequential arms)
    port: int
    arms: int  # masters each pod serves, one after the other

    @property
    def port_name(self) -> str:
        return SHARED_PORT_NAME if self.arm is None else self.arm.value


# The serving arm on whose master port the tiered arm's master runs after the serving arms:
# loadtest/runner.py run_comparison, ``run_arms([plans[TIERED_ARM]], ..., ports[:1], ...)``
# with ``ports`` the baseline's then the speculative's.
TIERED_ON = Arm.BASELINE


def worker_sets(config: ExperimentConfig) -> list[WorkerSet]:
    """Sequential arms: one set serves both masters in turn on the one port. Otherwise the
    masters run at once, each on its own port, with a set of workers each. With
    ``loadtest.drive_gateway`` the tiered master runs last on ``TIERED_ON``'s port: that port's set
    serves one master more."""
    lt = config.loadtest
    tiered = 1 if lt.drive_gateway else 0
    if lt.arms_mode is ArmsMode.SEQUENTIAL:
        return [WorkerSet(None, lt.master_port, len(Arm) + tiered)]
    return [
        WorkerSet(arm, lt.master_port_of(arm), 1 + (tiered if arm is TIERED_ON else 0))
        for arm in Arm
    ]


def master_service_name(config: ExperimentConfig) -> str:
    return f"{config.project}-loadtest-master"


def deadline_s(config: ExperimentConfig) -> int:
    """Both Jobs' activeDeadlineSeconds: the readiness wait, the comparison's own bound, the
    masters' waits for their workers and room to write the report and publish after it. At
    the deadline Kubernetes sends SIGTERM: the run stops, writes its partial report and
    publishes it (``python -m loadtest run`` handles SIGTERM as a cancel)."""
    lt = config.loadtest
    # Each master may wait this long for its worker pods before its run time starts: once
    # per arm in turn, once for masters that run at once, once more for the tiered master
    # after them. The set serving the most masters in turn counts them (max_duration_s is
    # split over the same turns, loadtest/plan.py arms_in_turn, so it still bounds the run).
    turns = max(workers.arms for workers in worker_sets(config))
    workers_connect = turns * lt.workers_connect_timeout_s if distributed(config) else 0
    return lt.wait_ready_s + int(lt.max_duration_s) + workers_connect + lt.job_deadline_margin_s


def loadtest_command(config: ExperimentConfig) -> list[str]:
    command = [
        "python", "-m", "loadtest", "run",
        "--baseline", service_url(config, Arm.BASELINE),
        "--speculative", service_url(config, Arm.SPECULATIVE),
        "--config", f"{CONFIG_DIR}/{CONFIG_FILE}",
        "--out", f"{RESULTS_DIR}/run",
        # Deployed with the services: they compile for hours on a first deploy.
        "--wait-ready", str(config.loadtest.wait_ready_s),
    ]  # fmt: skip
    if config.loadtest.drive_gateway:
        command += ["--tiered", gateway_url(config)]
    if config.loadtest.traffic.file is not None:
        # The run copies s3://<bucket>/<loadtest.traffic.bucket_key()> into its run directory
        # (loadtest/traffic.py fetch_traffic) and replays that copy. The bucket is a deploy-
        # time token: Kubernetes expands $(VAR) in a command from the container's env
        # (kubernetes.io docs/tasks/inject-data-application/define-command-argument-container:
        # "Use environment variables to define arguments"), so the Job's name hash is stable.
        command += ["--traffic-bucket", f"$({TRAFFIC_BUCKET_ENV})"]
    if distributed(config):
        # --workers comes from the config file; the workers are the other Job's pods.
        command.append("--workers-external")
    return command


def worker_command(config: ExperimentConfig, workers: WorkerSet) -> list[str]:
    master = f"{master_service_name(config)}.{config.serving.namespace}.svc"
    return [
        "python", "-m", "loadtest.worker_pod",
        "--master-host", master,
        "--master-port", str(workers.port),
        "--arms", str(workers.arms),
        "--deadline-s", str(deadline_s(config)),
    ]  # fmt: skip


def settings_json(config: ExperimentConfig) -> str:
    """Only what differs from the defaults: the image carries the same defaults (built from
    the same source), and an unrelated default changing elsewhere does not touch the Job."""
    return config.model_dump_json(indent=2, exclude_defaults=True)


def config_map_name(config: ExperimentConfig) -> str:
    return f"{config.project}-loadtest-config"


def config_map(config: ExperimentConfig) -> dict[str, Any]:
    name = config_map_name(config)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(config, name, labels(config, COMPONENT, name)),
        "data": {CONFIG_FILE: settings_json(config)},
    }


def service_account(config: ExperimentConfig) -> dict[str, Any]:
    name = config.loadtest.service_account
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": metadata(config, name, labels(config, COMPONENT, name)),
        "automountServiceAccountToken": False,  # Pod Identity injects its own token
    }


def pod_spec(
    config: ExperimentConfig,
    inputs: ClusterInputs,
    command: list[str],
    *,
    reports: bool,
    config_file: bool | None = None,
) -> dict[str, Any]:
    """A pod of the load-test image: the master (``reports``: service account, config,
    results), a worker, or another of the image's commands that reads the experiment config
    and nothing else (``config_file`` without ``reports``: the guardrail probe)."""
    pod = config.loadtest.pod
    mounts: list[dict[str, Any]] = [{"name": "tmp", "mountPath": "/tmp"}]
    volumes: list[dict[str, Any]] = [{"name": "tmp", "emptyDir": {"sizeLimit": f"{pod.tmp_gib}Gi"}}]
    if reports:
        mounts.append({"name": "results", "mountPath": RESULTS_DIR})
        volumes.append({"name": "results", "emptyDir": {"sizeLimit": f"{pod.results_gib}Gi"}})
    if reports if config_file is None else config_file:
        mounts.append({"name": "config", "mountPath": CONFIG_DIR, "readOnly": True})
        volumes.append({"name": "config", "configMap": {"name": config_map_name(config)}})
    container: dict[str, Any] = {
        "name": COMPONENT,
        "image": inputs.loadtest_image,
        "imagePullPolicy": "Always",
        "command": command,
        "env": [
            {"name": "AWS_REGION", "value": config.region},
            *(
                [{"name": TRAFFIC_BUCKET_ENV, "value": inputs.bucket_name}]
                if reports and config.loadtest.traffic.file is not None
                else []
            ),
        ],
        "resources": {
            "requests": {"cpu": str(pod.cpu), "memory": f"{pod.memory_gib}Gi"},
            "limits": {"cpu": str(pod.cpu_limit), "memory": f"{pod.memory_limit_gib}Gi"},
        },
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": mounts,
    }
    init_containers: list[dict[str, Any]] = []
    if reports:
        init_containers = [arms_routed_container(config, inputs, container)]
        volumes.append(API_TOKEN_VOLUME)
    if distributed(config) and reports:
        container["ports"] = [
            {"name": w.port_name, "containerPort": w.port} for w in worker_sets(config)
        ]
    spec: dict[str, Any] = {
        # Pod Identity mounts its own token; the master's init container alone gets an API
        # token (API_TOKEN_VOLUME).
        "automountServiceAccountToken": False,
        "restartPolicy": "Never",
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": 10001,
            "runAsGroup": 10001,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        **({"initContainers": init_containers} if init_containers else {}),
        "containers": [container],
        "volumes": volumes,
    }
    if reports:
        spec = {
            "serviceAccountName": config.loadtest.service_account,
            "terminationGracePeriodSeconds": config.loadtest.termination_grace_s,
            **spec,
        }
    return spec


# The init container's only Kubernetes API credential: a projected, expiring token of the
# load test's service account, mounted in that container alone (the pod keeps
# automountServiceAccountToken false). Same layout as the kubelet's own kube-api-access.
API_TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
API_TOKEN_VOLUME: dict[str, Any] = {
    "name": "kube-api-access",
    "projected": {
        "sources": [
            {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}},
            {"configMap": {"name": "kube-root-ca.crt",
                           "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        ]
    },
}  # fmt: skip


def arms_routed_container(
    config: ExperimentConfig, inputs: ClusterInputs, main: dict[str, Any]
) -> dict[str, Any]:
    """Waits (bounded by ``loadtest.wait_ready_s``) until the baseline Service selects the
    Rollout's stable revision and the speculative Service its canary revision
    (runtime/arms_routed.py): before that, or after an abort, the speculative Service
    reaches baseline pods and ``/health`` alone cannot tell."""
    serving = config.serving
    return {
        "name": "wait-arms-routed",
        "image": inputs.loadtest_image,
        "imagePullPolicy": main["imagePullPolicy"],
        "command": [
            "python",
            "-m",
            "runtime.arms_routed",
            "--namespace",
            serving.namespace,
            "--rollout",
            rollout_name(config),
            "--baseline-service",
            serving.service_name(Arm.BASELINE),
            "--speculative-service",
            serving.service_name(Arm.SPECULATIVE),
            "--timeout-s",
            str(config.loadtest.wait_ready_s),
        ],
        "resources": {
            "requests": dict(ARMS_ROUTED_RESOURCES),
            "limits": dict(ARMS_ROUTED_RESOURCES),
        },
        "securityContext": dict(main["securityContext"]),
        "volumeMounts": [{"name": "kube-api-access", "mountPath": API_TOKEN_DIR, "readOnly": True}],
    }


# The wait only polls the API server.
ARMS_ROUTED_RESOURCES = {"cpu": "100m", "memory": "128Mi"}


def arms_routed_access(config: ExperimentConfig) -> list[dict[str, Any]]:
    """What the wait reads, and nothing else: the Rollout and the two arms' Services."""
    name = f"{config.project}-loadtest-reads-arms"
    serving = config.serving
    rules = [
        {"apiGroups": [ROLLOUTS_API.split("/")[0]], "resources": ["rollouts"],
         "resourceNames": [rollout_name(config)], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["services"],
         "resourceNames": [serving.service_name(arm) for arm in Arm], "verbs": ["get"]},
    ]  # fmt: skip
    account = {
        "kind": "ServiceAccount",
        "name": config.loadtest.service_account,
        "namespace": serving.namespace,
    }
    return role_with_binding(config, name, COMPONENT, rules, account)


def _pod_labels(config: ExperimentConfig, role: str, arm: Arm | None = None) -> dict[str, str]:
    base = labels(config, COMPONENT, config.project)
    if not distributed(config):
        return base
    # Worker pods of one arm (arms at once) carry the arm as the vLLM pods do: the
    # NetworkPolicy opens that arm's master port to them only.
    return {**base, ROLE_LABEL: role, **({ARM_LABEL: arm.value} if arm else {})}


def worker_pod_labels(config: ExperimentConfig, workers: WorkerSet) -> dict[str, str]:
    return _pod_labels(config, WORKER_ROLE, workers.arm)


def job(config: ExperimentConfig, inputs: ClusterInputs) -> dict[str, Any]:
    command = loadtest_command(config)
    # Jobs are immutable: a changed command or config gets a new Job name, not a failed patch.
    name = f"{config.project}-loadtest-{short_hash([*command, settings_json(config)])}"
    job_labels = _pod_labels(config, MASTER_ROLE)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            **metadata(config, name, job_labels),
            "annotations": CHECKOV_SKIPS,
        },
        "spec": {
            "backoffLimit": 0,  # a failed comparison is reported, never silently retried
            "activeDeadlineSeconds": deadline_s(config),
            "template": {
                "metadata": {"labels": job_labels},
                "spec": pod_spec(config, inputs, command, reports=True),
            },
        },
    }


def worker_job(
    config: ExperimentConfig, inputs: ClusterInputs, workers_set: WorkerSet
) -> dict[str, Any]:
    """N worker pods; each runs a Locust worker per arm of its set against the master's
    Service, on its set's port."""
    command = worker_command(config, workers_set)
    workers = config.loadtest.workers
    arm = f"{workers_set.arm.value}-" if workers_set.arm else ""
    digest = short_hash([*command, settings_json(config)])
    name = f"{config.project}-loadtest-workers-{arm}{digest}"
    worker_labels = worker_pod_labels(config, workers_set)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {**metadata(config, name, worker_labels), "annotations": CHECKOV_SKIPS},
        "spec": {
            "parallelism": workers,
            "completions": workers,
            "backoffLimit": 0,  # a lost worker is reported by the master, not replaced mid-arm
            "activeDeadlineSeconds": deadline_s(config),
            "template": {
                "metadata": {"labels": worker_labels},
                "spec": pod_spec(config, inputs, command, reports=False),
            },
        },
    }


def master_service(config: ExperimentConfig) -> dict[str, Any]:
    """Headless: the workers resolve the master pod's own address (ZeroMQ connects to it);
    one port per master that runs (each arm's, or the one shared in turn)."""
    name = master_service_name(config)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(config, name, labels(config, COMPONENT, name)),
        "spec": {
            "clusterIP": "None",
            "selector": _pod_labels(config, MASTER_ROLE),
            "ports": [
                {"name": w.port_name, "port": w.port, "targetPort": w.port, "protocol": "TCP"}
                for w in worker_sets(config)
            ],
        },
    }


CHECKOV_SKIPS: dict[str, str] = {
    "checkov.io/skip1": "CKV_K8S_43=The image is a CDK image asset whose ECR URI is only "
    "known at deploy time (a content-hash tag, immutable by construction)",
}


def loadtest_manifests(config: ExperimentConfig, inputs: ClusterInputs) -> list[dict[str, Any]]:
    manifests = [
        service_account(config),
        *arms_routed_access(config),
        config_map(config),
        job(config, inputs),
    ]
    if distributed(config):
        manifests.append(master_service(config))
        manifests += [worker_job(config, inputs, w) for w in worker_sets(config)]
    return manifests
