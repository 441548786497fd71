"""The load-test Job: Locust headless against both services, bounded in time.

Runs under its own service account, which EKS Pod Identity binds (CDK stack) to a role
that may only put metrics in the project's CloudWatch namespace. It first waits, bounded by
``loadtest.wait_ready_s``, until each compared arm's Service selects its own revision of the
guardrail Rollout (init container, ``runtime/arms_routed.py``: before the speculative pods
are available, and after an abort, the speculative Service reaches baseline pods), then for
both services' ``/health`` (logged): on a first deploy they compile for hours.

With ``loadtest.workers`` N > 1 the Job's pod is the Locust master (``python -m loadtest run
--workers-external``, N from the config file) and a second Job runs N worker pods of the same
image and size. Why a plain Job of workers plus a headless Service for the master, not one
Indexed Job: the master is a different program (it waits, runs both arms, writes the report and
publishes to CloudWatch with the service account's role) while the workers only need the
master's address; Locust hands out worker indexes itself (the master's ``ack``), so the Job
index would be a second, unused numbering. The workers need no AWS access and run without
the service account. Worker pods retry until their master has run both arms
(loadtest/worker_pod.py), bounded by the same deadline.
"""

from __future__ import annotations

from typing import Any

from charts.inputs import ClusterInputs
from charts.naming import labels, metadata, short_hash
from charts.rollout import ROLLOUTS_API, rollout_name
from experiment.config import Arm, ExperimentConfig

COMPONENT = "loadtest"
# The resolved experiment config the stack was synthesized with, so the Job measures with
# the same names, scale and metric namespace (its IAM condition) as cdk.json says.
CONFIG_DIR = "/etc/specdecode/experiment"
CONFIG_FILE = "config.json"
# The image's root filesystem is read-only in the pod; records and reports go here.
RESULTS_DIR = "/results"


def service_url(config: ExperimentConfig, arm: Arm) -> str:
    serving = config.serving
    return f"http://{serving.service_name(arm)}.{serving.namespace}.svc:{serving.port}"


# Pods of the load test carry this label: the master (the Job that reports) or a worker.
ROLE_LABEL = "specdecode.aws/loadtest-role"
MASTER_ROLE = "master"
WORKER_ROLE = "worker"


def distributed(config: ExperimentConfig) -> bool:
    return config.loadtest.workers > 1


def master_service_name(config: ExperimentConfig) -> str:
    return f"{config.project}-loadtest-master"


def deadline_s(config: ExperimentConfig) -> int:
    """Both Jobs' activeDeadlineSeconds: the readiness wait, the comparison's own bound, the
    masters' waits for their workers and room to write the report and publish after it. At
    the deadline Kubernetes sends SIGTERM: the run stops, writes its partial report and
    publishes it (``python -m loadtest run`` handles SIGTERM as a cancel)."""
    lt = config.loadtest
    # Each arm's master may wait this long for the worker pods before its run time starts.
    workers_connect = 2 * lt.workers_connect_timeout_s if distributed(config) else 0
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
    if distributed(config):
        # --workers comes from the config file; the workers are the other Job's pods.
        command.append("--workers-external")
    return command


def worker_command(config: ExperimentConfig) -> list[str]:
    master = f"{master_service_name(config)}.{config.serving.namespace}.svc"
    return [
        "python", "-m", "loadtest.worker_pod",
        "--master-host", master,
        "--master-port", str(config.loadtest.master_port),
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


def _pod_spec(
    config: ExperimentConfig, inputs: ClusterInputs, command: list[str], *, reports: bool
) -> dict[str, Any]:
    """The pod of the master (``reports``: service account, config, results) or a worker."""
    pod = config.loadtest.pod
    mounts: list[dict[str, Any]] = [{"name": "tmp", "mountPath": "/tmp"}]
    volumes: list[dict[str, Any]] = [{"name": "tmp", "emptyDir": {"sizeLimit": f"{pod.tmp_gib}Gi"}}]
    if reports:
        mounts += [
            {"name": "results", "mountPath": RESULTS_DIR},
            {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
        ]
        volumes += [
            {"name": "results", "emptyDir": {"sizeLimit": f"{pod.results_gib}Gi"}},
            {"name": "config", "configMap": {"name": config_map_name(config)}},
        ]
    container: dict[str, Any] = {
        "name": COMPONENT,
        "image": inputs.loadtest_image,
        "imagePullPolicy": "Always",
        "command": command,
        "env": [{"name": "AWS_REGION", "value": config.region}],
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
            {"name": "locust-master", "containerPort": config.loadtest.master_port}
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
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": metadata(config, name, labels(config, COMPONENT, name)),
        "rules": [
            {"apiGroups": [ROLLOUTS_API.split("/")[0]], "resources": ["rollouts"],
             "resourceNames": [rollout_name(config)], "verbs": ["get"]},
            {"apiGroups": [""], "resources": ["services"],
             "resourceNames": [serving.service_name(arm) for arm in Arm], "verbs": ["get"]},
        ],
    }  # fmt: skip
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": metadata(config, name, labels(config, COMPONENT, name)),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [
            {
                "kind": "ServiceAccount",
                "name": config.loadtest.service_account,
                "namespace": serving.namespace,
            }
        ],
    }
    return [role, binding]


def _pod_labels(config: ExperimentConfig, role: str) -> dict[str, str]:
    base = labels(config, COMPONENT, config.project)
    return {**base, ROLE_LABEL: role} if distributed(config) else base


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
                "spec": _pod_spec(config, inputs, command, reports=True),
            },
        },
    }


def worker_job(config: ExperimentConfig, inputs: ClusterInputs) -> dict[str, Any]:
    """N worker pods; each runs a Locust worker per arm against the master's Service."""
    command = worker_command(config)
    workers = config.loadtest.workers
    name = f"{config.project}-loadtest-workers-{short_hash([*command, settings_json(config)])}"
    worker_labels = _pod_labels(config, WORKER_ROLE)
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
                "spec": _pod_spec(config, inputs, command, reports=False),
            },
        },
    }


def master_service(config: ExperimentConfig) -> dict[str, Any]:
    """Headless: the workers resolve the master pod's own address (ZeroMQ connects to it)."""
    name = master_service_name(config)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(config, name, labels(config, COMPONENT, name)),
        "spec": {
            "clusterIP": "None",
            "selector": _pod_labels(config, MASTER_ROLE),
            "ports": [
                {
                    "name": "locust-master",
                    "port": config.loadtest.master_port,
                    "targetPort": config.loadtest.master_port,
                    "protocol": "TCP",
                }
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
        manifests += [master_service(config), worker_job(config, inputs)]
    return manifests
